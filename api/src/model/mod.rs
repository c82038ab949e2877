//! Request and response bodies, and the OpenAPI schemas of the documents the service exchanges.
//!
//! The graph and plan documents are parsed by the `memplan` library itself ([`memplan::Graph`],
//! [`memplan::Plan`]); [`GraphDoc`] and [`PlanDoc`] only describe them for the OpenAPI document
//! (a test checks that they name every field the library reads and writes). Strategy, order,
//! rewrite, conv algorithm, spill strategy and plan status names come from the library's
//! registries ([`memplan::Strategy::ALL`], [`memplan::OrderMode::ALL`], [`memplan::Rewrite::ALL`],
//! [`memplan::conv_algo::ConvAlgoMode::ALL`], [`memplan::budget::registry`],
//! [`memplan::PlanStatus::ALL`]).
//!
//! The planning options are the pipeline's ([`memplan::PipelineOptions`]): [`PlanOptionsBody`]
//! documents them (with the service's `cache`), [`ResolvedOptions`] holds them resolved.

mod check;
mod documents;
mod health;
mod instantiate;
mod jobs;
mod names;
mod options;
mod place;
pub mod rules;
mod symbolic;

pub use check::{CheckRequest, CheckResponse, ViolationView};
pub use documents::{
    example_graph, example_plan, BudgetStatDoc, CheckedPlanDoc, CheckedPlanStatsDoc, ExactStatDoc,
    FusedMemberDoc, GraphDoc, IlpStatDoc, InstructionDoc, InternalTensorDoc, MemberStatDoc, OpDoc,
    OrderIlpStatDoc, PlanDoc, PlanStatsDoc, RewriteStepDoc, StreamCandidateDoc, StreamStatDoc,
    TensorDoc, TensorKindDoc, TierStatDoc, TileRegionStepDoc, TriedStatDoc, WeightSlotDoc,
};
pub use health::Health;
pub use instantiate::{InstantiateRequest, InstantiateResponse};
pub use jobs::{
    JobLinks, JobList, JobListQuery, JobStatus, JobView, Progress, DEFAULT_LIST_LIMIT,
    MAX_LIST_LIMIT,
};
pub use names::{
    BudgetValue, ConvAlgoName, OrderName, PlanStatusName, RewriteName, SpillStrategyName,
    StrategyName,
};
pub use options::{
    DeviceProfileDoc, PlanOptionsBody, PlanQuery, PlanRequest, ResolvedOptions, NULLABLE_OPTIONS,
};
pub use place::{BufferBody, BufferId, PlaceQuery, PlaceRequest, PlaceResponse, PlacedBuffer};
pub use symbolic::{PeakAt, PieceRange, SymbolicPlanRequest, SymbolicPlanResponse};
