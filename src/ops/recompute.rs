//! Whether an op may be executed a second time (a *recompute*) without changing the results.
//!
//! A budgeted plan may free a tensor and re-execute its producer before the next use. That
//! is only sound when the second run writes the same bytes as the first. Two kinds of op do
//! not:
//! - **random** ops draw new random numbers on every run: dropout in all its variants
//!   (`dropout`, `aten::dropout`, `native_dropout`, `feature_dropout`, `alpha_dropout`,
//!   `dropout2d`, ...), the samplers (`rand`, `randn`, `randint`, `rand_like`, `randn_like`,
//!   `randperm`, `bernoulli`, `uniform`, `normal`, `multinomial`, `random_`, `exponential`,
//!   `poisson`, `rrelu`, ...) and the ONNX generators (`RandomNormal`, `RandomUniform`,
//!   `RandomNormalLike`, `RandomUniformLike`, `Bernoulli`, `Multinomial`). A recomputed
//!   dropout mask differs from the one the forward pass used, so the gradients are wrong.
//!   Backward ops (`native_dropout_backward`) are deterministic and stay allowed.
//! - **stateful** ops update state in place: ATen names ending in one `_` (`add_`, `relu_`,
//!   `copy_`, `index_put_`, `uniform_`, ...) mutate their first input; running them again
//!   mutates it again. (The graph's `inplace` field is unrelated: it says the *planner may*
//!   let an output share an input's memory, not that the op mutates anything.)
//!
//! The graph's optional per-op field `"recompute": true | false` overrides the type default
//! ([`crate::graph::Op::recompute`]): `false` forbids recomputing any op (the importers
//! write it on random and in-place ops), `true` allows it (for a runtime that replays the
//! op deterministically, e.g. by restoring its random state). [`may_recompute`] is the one
//! predicate every budget strategy and the validator use.

use crate::graph::Op;

/// Namespace and overload parts that a type name may carry around its base name
/// (`aten::dropout`, `aten.bernoulli.p`, `torch.nn.functional.dropout`, `onnx::RandomNormal`).
const NAMESPACES: [&str; 9] = [
    "aten",
    "torch",
    "prims",
    "ops",
    "onnx",
    "ai",
    "nn",
    "functional",
    "_ops",
];

/// Base names (lower case, leading and trailing `_` removed) of random ops that are not
/// caught by the prefix rules of [`is_random`].
const RANDOM_OPS: [&str; 17] = [
    "bernoulli",
    "multinomial",
    "uniform",
    "normal",
    "normal_functional",
    "exponential",
    "geometric",
    "cauchy",
    "log_normal",
    "poisson",
    "binomial",
    "rrelu",
    "rrelu_with_noise",
    "standard_gamma",
    "sample_dirichlet",
    "gumbel_softmax",
    "fused_dropout",
];

/// The base name of an op type: lower case, without a namespace (`aten::`, `aten.`, `onnx::`,
/// `torch.nn.functional.`) or an overload suffix (`.default`, `.Tensor`, `.p`).
pub fn base_name(op_type: &str) -> String {
    let t = op_type.trim().to_ascii_lowercase();
    let t = t.rsplit("::").next().unwrap_or("");
    t.split('.')
        .find(|p| !p.is_empty() && !NAMESPACES.contains(p))
        .unwrap_or("")
        .to_string()
}

/// Whether an op type draws random numbers (see the module doc): any dropout but its
/// backward, a name starting with `rand` (`rand`, `randn`, `randint`, `rand_like`,
/// `randperm`, `random_`, ONNX `RandomNormal`, `RandomUniformLike`, ...), or one of the
/// samplers (`bernoulli`, `uniform`, `normal`, `multinomial`, `exponential`, `poisson`, ...).
pub fn is_random(op_type: &str) -> bool {
    let base = base_name(op_type);
    let core = base.trim_matches('_');
    if core.ends_with("_backward") || core.ends_with("backward_data") {
        return false;
    }
    core.contains("dropout")
        || core.starts_with("rand")
        || RANDOM_OPS.contains(&core)
        || RANDOM_OPS
            .iter()
            .any(|r| core.strip_prefix(r).is_some_and(|rest| rest == "_like"))
}

/// Whether an op type mutates an input in place: an ATen-style name ending in exactly one
/// `_` (`add_`, `relu_`, `copy_`, `index_put_`; not a Python dunder such as `__and__`).
pub fn mutates_input(op_type: &str) -> bool {
    let base = base_name(op_type);
    base.len() > 1 && base.ends_with('_') && !base.ends_with("__")
}

/// Whether an op of this type may be recomputed when the graph does not say: neither random
/// ([`is_random`]) nor mutating an input ([`mutates_input`]).
pub fn recompute_by_default(op_type: &str) -> bool {
    !is_random(op_type) && !mutates_input(op_type)
}

/// Whether a plan may execute `op` a second time (a recompute): the op's `recompute` flag
/// when the graph gives one, else the type default ([`recompute_by_default`]); a fused op
/// without the flag is recomputable only when each of its members' types is.
pub fn may_recompute(op: &Op) -> bool {
    if let Some(flag) = op.recompute {
        return flag;
    }
    recompute_by_default(&op.op_type)
        && op
            .fused
            .as_ref()
            .is_none_or(|f| f.members.iter().all(|m| recompute_by_default(&m.op_type)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_dropout_variant_is_random_but_its_backward_is_not() {
        for t in [
            "dropout",
            "aten::dropout",
            "aten.dropout.default",
            "native_dropout",
            "aten.native_dropout.default",
            "feature_dropout",
            "alpha_dropout",
            "feature_alpha_dropout",
            "dropout2d",
            "_fused_dropout",
            "Dropout",
            "torch.nn.functional.dropout",
            "dropout_",
        ] {
            assert!(is_random(t), "{t}");
            assert!(!recompute_by_default(t), "{t}");
        }
        assert!(!is_random("native_dropout_backward"));
        assert!(recompute_by_default("native_dropout_backward"));
    }

    #[test]
    fn samplers_and_onnx_generators_are_random() {
        for t in [
            "rand",
            "randn",
            "randint",
            "rand_like",
            "randn_like",
            "randint_like",
            "randperm",
            "bernoulli",
            "aten.bernoulli.p",
            "bernoulli_",
            "uniform",
            "uniform_",
            "normal",
            "aten::normal.Tensor_Tensor",
            "multinomial",
            "random_",
            "exponential_",
            "poisson",
            "RandomNormal",
            "RandomUniform",
            "RandomNormalLike",
            "RandomUniformLike",
            "Bernoulli",
            "Multinomial",
            "onnx::RandomNormal",
        ] {
            assert!(is_random(t), "{t}");
        }
        for t in [
            "relu",
            "normalize",
            "layer_norm",
            "batch_norm",
            "range",
            "conv2d",
            "add",
            "uniformize",
            "_unsafe_view",
            "empty",
        ] {
            assert!(!is_random(t), "{t}");
        }
    }

    #[test]
    fn aten_names_ending_in_one_underscore_mutate_an_input() {
        for t in [
            "add_",
            "relu_",
            "copy_",
            "index_put_",
            "aten::add_.Tensor",
            "_foreach_add_",
        ] {
            assert!(mutates_input(t), "{t}");
            assert!(!recompute_by_default(t), "{t}");
        }
        for t in ["add", "__and__", "_unsafe_view", "relu", "_", "index_put"] {
            assert!(!mutates_input(t), "{t}");
        }
    }

    fn op(ty: &str, flag: Option<bool>) -> Op {
        Op {
            stream: None,
            name: "o".into(),
            op_type: ty.into(),
            inputs: Vec::new(),
            outputs: Vec::new(),
            flops: None,
            time_us: None,
            workspace: 0,
            attrs: None,
            inplace: vec![(0, 0)],
            fused: None,
            recompute: flag,
        }
    }

    #[test]
    fn the_flag_overrides_the_type_default_and_inplace_hints_do_not_count() {
        assert!(may_recompute(&op("relu", None)));
        assert!(!may_recompute(&op("relu", Some(false))));
        assert!(!may_recompute(&op("dropout", None)));
        assert!(may_recompute(&op("dropout", Some(true))));
        assert!(!may_recompute(&op("add_", None)));
        // `inplace` pairs let the planner share memory; they do not make an op stateful.
        assert!(may_recompute(&op("add", None)));
    }
}
