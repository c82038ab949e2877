//! The symbolic graph document: memplan-graph/1 (docs/FORMATS.md §1) plus a `symbols` object
//! and string size expressions.
//!
//! ```json
//! {"format": "memplan-graph/1", "name": "mlp", "alignment": 256,
//!  "symbols": {"B": {"min": 1, "max": 64}, "S": {"min": 16, "max": 512}},
//!  "tensors": [
//!    {"name": "x", "size": "B*S*768*4", "shape": ["B", "S", 768], "dtype": "f32", "kind": "input"},
//!    {"name": "w", "size": 2359296, "kind": "weight"},
//!    {"name": "y", "size": "B*S*768*4", "kind": "output"}],
//!  "ops": [{"name": "mm", "type": "matmul", "inputs": ["x", "w"], "outputs": ["y"],
//!           "workspace": "1024 + 4*B*S"}]}
//! ```
//!
//! - `symbols` (optional): each name (`[A-Za-z_][A-Za-z0-9_]*`) maps to `{"min": m, "max": M}`
//!   with integers `1 <= m <= M`. A document without symbols is an ordinary graph.
//! - A tensor's `size`, an op's `workspace` and the entries of a tensor's `shape` may be a
//!   string expression ([`super::expr`]); every symbol it names must be declared. Sizes must
//!   be > 0 at every binding: with symbols ≥ 1 and non-negative coefficients, that is every
//!   size expression but the zero polynomial. Every value must fit in u64 at the max corner,
//!   hence (monotonicity) at every binding in range.
//!
//! Every other rule of the format is checked once, by [`Graph::parse`]: parsing substitutes
//! the max corner's values into the JSON document and parses the result; instantiating does
//! the same for the binding given. Sizes only shrink below the max corner, so the byte totals
//! that [`Graph::parse`] guards against overflow are safe at every binding in range.

use super::expr::{is_symbol_name, Poly};
use super::{Binding, SymbolRange, SymbolicError, Symbols};
use crate::graph::Graph;
use serde_json::Value;

/// Where an expression sits in the document.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Site {
    /// `tensors[i].size`.
    Size(usize),
    /// `tensors[i].shape[d]`.
    Shape(usize, usize),
    /// `ops[k].workspace`.
    Workspace(usize),
}

/// A parsed symbolic graph: the declared symbols, every tensor's size and every op's workspace
/// as polynomials, and the document to instantiate.
#[derive(Debug, Clone, PartialEq)]
pub struct SymbolicGraph {
    /// The graph's name.
    pub name: String,
    /// The declared symbols and their ranges.
    pub symbols: Symbols,
    /// Every tensor's size in bytes, by tensor index (a constant for a numeric size).
    pub sizes: Vec<Poly>,
    /// Every op's workspace in bytes, by op index (zero when absent).
    pub workspaces: Vec<Poly>,
    /// The document without `symbols`, expressions still as strings.
    doc: Value,
    /// The expressions to substitute, with what they are for error messages.
    sites: Vec<(Site, Poly, String)>,
}

fn json_error(e: &serde_json::Error) -> SymbolicError {
    SymbolicError::Json {
        line: e.line(),
        column: e.column(),
        message: crate::json_path::strip_position(&e.to_string()),
    }
}

impl SymbolicGraph {
    /// Parses and checks a symbolic graph document (module doc); every error names the
    /// tensor, op or symbol concerned.
    pub fn parse(text: &str) -> Result<SymbolicGraph, SymbolicError> {
        let mut doc: Value = serde_json::from_str(text).map_err(|e| json_error(&e))?;
        let Some(obj) = doc.as_object_mut() else {
            return Err(SymbolicError::Json {
                line: 1,
                column: 1,
                message: "expected a memplan-graph/1 object".into(),
            });
        };
        // A document of another kind (a symbolic plan also declares symbols) is named by its
        // format, as `Graph::parse` names it.
        if let Some(Value::String(found)) = obj.get("format") {
            if found != crate::graph::GRAPH_FORMAT
                && crate::json_path::KNOWN_FORMATS.contains(&found.as_str())
            {
                return Err(SymbolicError::Json {
                    line: 1,
                    column: 1,
                    message: crate::graph::GraphError::Format {
                        found: found.clone(),
                    }
                    .to_string(),
                });
            }
        }
        let symbols = match obj.remove("symbols") {
            None | Some(Value::Null) => Symbols::new(),
            Some(v) => parse_symbols(&v)?,
        };
        let declared = symbols.keys().cloned().collect::<Vec<_>>().join(", ");
        let mut sites = Vec::new();
        let mut sizes = Vec::new();
        let mut workspaces = Vec::new();
        let mut expr = |what: String, text: &str, site: Site| -> Result<Poly, SymbolicError> {
            let poly = Poly::parse(text).map_err(|source| SymbolicError::Expr {
                what: what.clone(),
                text: text.to_string(),
                source,
            })?;
            if let Some(s) = poly
                .symbols()
                .into_iter()
                .find(|s| !symbols.contains_key(*s))
            {
                return Err(SymbolicError::Undeclared {
                    what,
                    symbol: s.to_string(),
                    declared: if declared.is_empty() {
                        "none".into()
                    } else {
                        declared.clone()
                    },
                });
            }
            if matches!(site, Site::Size(_)) && poly.is_zero() {
                return Err(SymbolicError::ZeroSize {
                    what,
                    text: text.to_string(),
                });
            }
            sites.push((site, poly.clone(), what));
            Ok(poly)
        };
        if let Some(Value::Array(tensors)) = obj.get("tensors") {
            for (i, t) in tensors.iter().enumerate() {
                let name = t
                    .get("name")
                    .and_then(Value::as_str)
                    .map_or_else(|| format!("#{i}"), |n| format!("{n:?}"));
                sizes.push(match t.get("size") {
                    Some(Value::String(s)) => {
                        expr(format!("tensor {name} size"), s, Site::Size(i))?
                    }
                    other => Poly::constant(other.and_then(Value::as_u64).unwrap_or(0)),
                });
                if let Some(Value::Array(dims)) = t.get("shape") {
                    for (d, v) in dims.iter().enumerate() {
                        if let Value::String(s) = v {
                            expr(format!("tensor {name} shape[{d}]"), s, Site::Shape(i, d))?;
                        }
                    }
                }
            }
        }
        if let Some(Value::Array(ops)) = obj.get("ops") {
            for (k, o) in ops.iter().enumerate() {
                let name = o
                    .get("name")
                    .and_then(Value::as_str)
                    .map_or_else(|| format!("#{k}"), |n| format!("{n:?}"));
                workspaces.push(match o.get("workspace") {
                    Some(Value::String(s)) => {
                        expr(format!("op {name} workspace"), s, Site::Workspace(k))?
                    }
                    other => Poly::constant(other.and_then(Value::as_u64).unwrap_or(0)),
                });
            }
        }
        let name = obj
            .get("name")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string();
        let g = SymbolicGraph {
            name,
            symbols,
            sizes,
            workspaces,
            doc,
            sites,
        };
        // Every other rule, once, at the max corner (the largest value of every expression).
        g.instantiate(&g.max_corner())?;
        Ok(g)
    }

    /// Whether the graph declares no symbol (it is then an ordinary graph).
    pub fn is_concrete(&self) -> bool {
        self.symbols.is_empty()
    }

    /// The binding with every symbol at its max.
    pub fn max_corner(&self) -> Binding {
        Binding::max_corner(&self.symbols)
    }

    /// The binding with every symbol at its min.
    pub fn min_corner(&self) -> Binding {
        Binding::min_corner(&self.symbols)
    }

    /// The ordinary graph at `binding`: every expression replaced by its value, then read
    /// by [`Graph::from_value`]. A missing, unknown or out-of-range symbol value is an error naming
    /// the symbol and its range.
    pub fn instantiate(&self, binding: &Binding) -> Result<Graph, SymbolicError> {
        binding.resolve(&self.symbols)?;
        let mut doc = self.doc.clone();
        for (site, poly, what) in &self.sites {
            let v =
                poly.eval(|s| binding.0.get(s).copied())
                    .map_err(|_| SymbolicError::Overflow {
                        what: what.clone(),
                        binding: binding.to_string(),
                    })?;
            let slot = match *site {
                Site::Size(i) => doc
                    .get_mut("tensors")
                    .and_then(|t| t.get_mut(i))
                    .and_then(|t| t.get_mut("size")),
                Site::Shape(i, d) => doc
                    .get_mut("tensors")
                    .and_then(|t| t.get_mut(i))
                    .and_then(|t| t.get_mut("shape"))
                    .and_then(|s| s.get_mut(d)),
                Site::Workspace(k) => doc
                    .get_mut("ops")
                    .and_then(|o| o.get_mut(k))
                    .and_then(|o| o.get_mut("workspace")),
            };
            if let Some(slot) = slot {
                *slot = Value::from(v);
            }
        }
        Graph::from_value(&doc).map_err(|source| SymbolicError::Graph {
            binding: binding.to_string(),
            source,
        })
    }

    /// Tensor `i`'s size in bytes at `binding` (resolved beforehand).
    pub fn size_at(&self, i: usize, binding: &Binding) -> Option<u64> {
        self.sizes.get(i)?.eval(|s| binding.0.get(s).copied()).ok()
    }
}

/// Parses the `symbols` object.
fn parse_symbols(v: &Value) -> Result<Symbols, SymbolicError> {
    let Value::Object(map) = v else {
        return Err(SymbolicError::Json {
            line: 1,
            column: 1,
            message: format!(
                "\"symbols\" must be an object of {{\"min\": m, \"max\": M}}, found {v}"
            ),
        });
    };
    let mut out = Symbols::new();
    for (name, decl) in map {
        let bad = |message: String| SymbolicError::BadSymbol {
            symbol: name.clone(),
            message,
        };
        if !is_symbol_name(name) {
            return Err(bad(
                "a symbol name is a letter or '_' followed by letters, digits or '_'".into(),
            ));
        }
        let field = |f: &str| -> Result<u64, SymbolicError> {
            match decl.get(f) {
                Some(x) => x
                    .as_u64()
                    .ok_or_else(|| bad(format!("{f} is {x}, expected a non-negative integer"))),
                None => Err(bad(format!(
                    "needs {{\"min\": m, \"max\": M}}, found {decl} (no {f})"
                ))),
            }
        };
        let (min, max) = (field("min")?, field("max")?);
        if min < 1 {
            return Err(bad(format!(
                "min is {min}; a symbol's range starts at 1 or above (sizes must stay > 0)"
            )));
        }
        if min > max {
            return Err(bad(format!("min {min} is greater than max {max}")));
        }
        out.insert(name.clone(), SymbolRange { min, max });
    }
    Ok(out)
}
