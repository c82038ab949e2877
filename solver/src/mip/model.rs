//! Building an integer program: columns with bounds, integrality and objective coefficients,
//! and rows of `(column, coefficient)` terms between bounds. Always minimised.

use std::ops::RangeBounds;

/// A column (variable) of a [`Model`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Col(pub(crate) highs::Col);

impl Col {
    /// Position of the column in the model: its index in [`MipSolution::columns`] and in the
    /// warm start.
    ///
    /// [`MipSolution::columns`]: super::MipSolution::columns
    pub fn index(self) -> usize {
        self.0.index()
    }
}

/// An integer program under construction (minimisation).
#[derive(Debug, Default)]
pub struct Model {
    pub(crate) problem: highs::RowProblem,
    /// Rows added so far.
    rows: usize,
    /// Nonzero coefficients (terms) added so far.
    nonzeros: usize,
}

impl Model {
    /// An empty model.
    pub fn new() -> Self {
        Model::default()
    }

    /// Adds a continuous column with objective coefficient `cost` within `bounds`.
    pub fn add_column(&mut self, cost: f64, bounds: impl RangeBounds<f64>) -> Col {
        Col(self.problem.add_column(cost, bounds))
    }

    /// Adds an integer column with objective coefficient `cost` within `bounds`.
    pub fn add_integer_column(&mut self, cost: f64, bounds: impl RangeBounds<f64>) -> Col {
        Col(self.problem.add_integer_column(cost, bounds))
    }

    /// Adds the row `bounds ∋ Σ coefficient · column` (HiGHS refuses a column repeated in one
    /// row: merge them first).
    pub fn add_row(
        &mut self,
        bounds: impl RangeBounds<f64>,
        terms: impl IntoIterator<Item = (Col, f64)>,
    ) {
        let mut nonzeros = 0usize;
        self.problem.add_row(
            bounds,
            terms.into_iter().map(|(c, v)| {
                nonzeros += 1;
                (c.0, v)
            }),
        );
        self.rows += 1;
        self.nonzeros += nonzeros;
    }

    /// Rows added so far.
    pub fn num_rows(&self) -> usize {
        self.rows
    }

    /// Nonzero coefficients added so far (the terms of every row).
    pub fn num_nonzeros(&self) -> usize {
        self.nonzeros
    }

    /// Columns added so far.
    pub fn num_cols(&self) -> usize {
        self.problem.num_cols()
    }
}
