//! Size expressions: a hand-written recursive-descent parser into a canonical polynomial with
//! non-negative integer coefficients ([`Poly`]).
//!
//! Grammar (spaces and tabs are skipped between tokens):
//!
//! ```text
//! expr   := term ('+' term)*
//! term   := factor ('*' factor)*
//! factor := NUMBER | SYMBOL | '(' expr ')'
//! NUMBER := [0-9]+            (fits in u64)
//! SYMBOL := [A-Za-z_][A-Za-z0-9_]*
//! ```
//!
//! `-` and `/` are refused: with non-negative coefficients a polynomial is **monotone
//! non-decreasing in every symbol**, which the symbolic plan's layout rule relies on
//! (`super::plan`). Parentheses nest at most [`MAX_DEPTH`] deep (the recursion is bounded by
//! it), a polynomial has at most [`MAX_TERMS`] terms, and every coefficient is a checked `u64`.
//! Parsing is linear in the text for sums; multiplying two polynomials costs the product of
//! their term counts (bounded by [`MAX_TERMS`]).

use std::collections::BTreeMap;
use std::fmt;
use thiserror::Error;

/// The deepest nesting of parentheses accepted.
pub const MAX_DEPTH: usize = 64;

/// The most terms a polynomial may have (after expansion).
pub const MAX_TERMS: usize = 4096;

/// Why an expression does not parse. Positions are 1-based columns (characters) in the
/// expression text.
#[derive(Debug, Clone, Error, PartialEq, Eq)]
pub enum ExprError {
    /// The expression is empty (or only spaces).
    #[error("empty expression")]
    Empty,
    /// A character that no token starts with.
    #[error("unexpected character {ch:?} at column {column}")]
    BadChar {
        /// 1-based column.
        column: usize,
        /// The character.
        ch: char,
    },
    /// A `-`: subtraction would make sizes non-monotone.
    #[error(
        "'-' at column {column} is not allowed: sizes are polynomials with non-negative \
         coefficients (monotone in every symbol); write the expression without subtraction"
    )]
    Minus {
        /// 1-based column.
        column: usize,
    },
    /// A `/`: division would make sizes non-polynomial.
    #[error(
        "'/' at column {column} is not allowed: sizes are polynomials with non-negative \
         coefficients (monotone in every symbol); write the expression without division"
    )]
    Divide {
        /// 1-based column.
        column: usize,
    },
    /// A number, symbol or `(` was expected.
    #[error("expected a number, a symbol or '(' at column {column}, found {found}")]
    ExpectedOperand {
        /// 1-based column.
        column: usize,
        /// What was there (`end of input` or the character).
        found: String,
    },
    /// An operator or the end was expected after an operand (e.g. `4B`, `(B`).
    #[error("expected {expected} at column {column}, found {found}")]
    ExpectedOperator {
        /// 1-based column.
        column: usize,
        /// `'+', '*' or end of input`, or `')'`.
        expected: &'static str,
        /// What was there.
        found: String,
    },
    /// A number does not fit in u64.
    #[error("number at column {column} does not fit in 64 bits")]
    NumberTooLarge {
        /// 1-based column.
        column: usize,
    },
    /// A coefficient or exponent overflowed while expanding the polynomial.
    #[error("the expression overflows 64-bit coefficients at column {column}")]
    Overflow {
        /// 1-based column of the operator whose result overflowed.
        column: usize,
    },
    /// Parentheses nest deeper than [`MAX_DEPTH`].
    #[error("parentheses nest deeper than {MAX_DEPTH} at column {column}")]
    TooDeep {
        /// 1-based column of the `(` that is one too deep.
        column: usize,
    },
    /// The expanded polynomial has more than [`MAX_TERMS`] terms.
    #[error("the expanded expression has more than {MAX_TERMS} terms (at column {column})")]
    TooManyTerms {
        /// 1-based column of the operator whose result is too large.
        column: usize,
    },
}

/// A monomial: symbols with exponents ≥ 1, sorted by name (empty: the constant monomial).
pub type Monomial = Vec<(String, u32)>;

/// A polynomial over named symbols with non-negative `u64` coefficients, in canonical form:
/// terms sorted by monomial (constant first), no zero coefficient, like terms merged. Two
/// expressions denote the same function exactly when their polynomials are equal.
///
/// Because every coefficient is ≥ 0, the value is monotone non-decreasing in every symbol
/// over the non-negative integers; with every symbol ≥ 1 it is 0 only if it is the zero
/// polynomial.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct Poly {
    terms: BTreeMap<Monomial, u64>,
}

impl Poly {
    /// The constant polynomial `c`.
    pub fn constant(c: u64) -> Poly {
        let mut terms = BTreeMap::new();
        if c > 0 {
            terms.insert(Vec::new(), c);
        }
        Poly { terms }
    }

    /// The polynomial `name`.
    pub fn symbol(name: &str) -> Poly {
        let mut terms = BTreeMap::new();
        terms.insert(vec![(name.to_string(), 1)], 1);
        Poly { terms }
    }

    /// Parses an expression (module doc grammar).
    pub fn parse(text: &str) -> Result<Poly, ExprError> {
        Parser::new(text).parse()
    }

    /// The terms, `(monomial, coefficient)`, in canonical order.
    pub fn terms(&self) -> impl Iterator<Item = (&Monomial, u64)> {
        self.terms.iter().map(|(m, &c)| (m, c))
    }

    /// Whether this is the zero polynomial.
    pub fn is_zero(&self) -> bool {
        self.terms.is_empty()
    }

    /// The constant value, when the polynomial names no symbol.
    pub fn as_constant(&self) -> Option<u64> {
        match self.terms.len() {
            0 => Some(0),
            1 => self.terms.get(&Vec::new()).copied(),
            _ => None,
        }
    }

    /// Every symbol named, sorted, without repeats.
    pub fn symbols(&self) -> Vec<&str> {
        let mut out: Vec<&str> = self
            .terms
            .keys()
            .flat_map(|m| m.iter().map(|(s, _)| s.as_str()))
            .collect();
        out.sort_unstable();
        out.dedup();
        out
    }

    /// The sum, `None` on coefficient overflow.
    pub fn checked_add(&self, other: &Poly) -> Option<Poly> {
        let mut terms = self.terms.clone();
        for (m, &c) in &other.terms {
            let e = terms.entry(m.clone()).or_insert(0);
            *e = e.checked_add(c)?;
        }
        Some(Poly { terms })
    }

    /// The product, `None` on coefficient or exponent overflow.
    pub fn checked_mul(&self, other: &Poly) -> Option<Poly> {
        let mut terms: BTreeMap<Monomial, u64> = BTreeMap::new();
        for (ma, &ca) in &self.terms {
            for (mb, &cb) in &other.terms {
                let m = mul_monomials(ma, mb)?;
                let c = ca.checked_mul(cb)?;
                let e = terms.entry(m).or_insert(0);
                *e = e.checked_add(c)?;
            }
        }
        Some(Poly { terms })
    }

    /// The value with every symbol given by `value` (`None` for an unknown symbol is
    /// reported as `Err(Some(name))`); `Err(None)` on u64 overflow.
    pub fn eval(&self, value: impl Fn(&str) -> Option<u64>) -> Result<u64, Option<&str>> {
        let mut sum: u64 = 0;
        for (m, &c) in &self.terms {
            let mut t = c;
            for (s, e) in m {
                let v = value(s).ok_or(Some(s.as_str()))?;
                t = t.checked_mul(v.checked_pow(*e).ok_or(None)?).ok_or(None)?;
            }
            sum = sum.checked_add(t).ok_or(None)?;
        }
        Ok(sum)
    }
}

/// The product of two sorted monomials, `None` on exponent overflow.
fn mul_monomials(a: &Monomial, b: &Monomial) -> Option<Monomial> {
    let mut out = Vec::with_capacity(a.len() + b.len());
    let (mut i, mut j) = (0, 0);
    while i < a.len() || j < b.len() {
        match (a.get(i), b.get(j)) {
            (Some(x), Some(y)) if x.0 == y.0 => {
                out.push((x.0.clone(), x.1.checked_add(y.1)?));
                i += 1;
                j += 1;
            }
            (Some(x), Some(y)) if x.0 < y.0 => {
                out.push(x.clone());
                i += 1;
            }
            (Some(_), Some(y)) | (None, Some(y)) => {
                out.push(y.clone());
                j += 1;
            }
            (Some(x), None) => {
                out.push(x.clone());
                i += 1;
            }
            (None, None) => break,
        }
    }
    Some(out)
}

/// Canonical text: terms joined by ` + `, each `coefficient*S*S*T` (coefficient 1 left out,
/// powers written as repeated factors); `0` for the zero polynomial. It parses back to the
/// same polynomial.
impl fmt::Display for Poly {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.terms.is_empty() {
            return f.write_str("0");
        }
        for (k, (m, &c)) in self.terms.iter().enumerate() {
            if k > 0 {
                f.write_str(" + ")?;
            }
            let mut first = true;
            if c != 1 || m.is_empty() {
                write!(f, "{c}")?;
                first = false;
            }
            for (s, e) in m {
                for _ in 0..*e {
                    if !first {
                        f.write_str("*")?;
                    }
                    f.write_str(s)?;
                    first = false;
                }
            }
        }
        Ok(())
    }
}

/// Serialised as its canonical text ([`fmt::Display`]).
impl serde::Serialize for Poly {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

/// Read from an expression string (or a plain integer).
impl<'de> serde::Deserialize<'de> for Poly {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Poly, D::Error> {
        #[derive(serde::Deserialize)]
        #[serde(untagged)]
        enum Text {
            Int(u64),
            Expr(String),
        }
        match Text::deserialize(d)? {
            Text::Int(n) => Ok(Poly::constant(n)),
            Text::Expr(s) => Poly::parse(&s).map_err(serde::de::Error::custom),
        }
    }
}

/// Whether `name` is a valid symbol name (`[A-Za-z_][A-Za-z0-9_]*`).
pub fn is_symbol_name(name: &str) -> bool {
    let mut chars = name.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

struct Parser {
    chars: Vec<char>,
    pos: usize,
    depth: usize,
}

impl Parser {
    fn new(text: &str) -> Parser {
        Parser {
            chars: text.chars().collect(),
            pos: 0,
            depth: 0,
        }
    }

    fn parse(mut self) -> Result<Poly, ExprError> {
        self.skip_spaces();
        if self.pos == self.chars.len() {
            return Err(ExprError::Empty);
        }
        let p = self.expr()?;
        self.skip_spaces();
        match self.peek() {
            None => Ok(p),
            Some(c) => Err(self.unexpected_after_operand(c, "'+', '*' or end of input")),
        }
    }

    fn peek(&self) -> Option<char> {
        self.chars.get(self.pos).copied()
    }

    fn column(&self) -> usize {
        self.pos + 1
    }

    fn skip_spaces(&mut self) {
        while matches!(self.peek(), Some(' ' | '\t' | '\n' | '\r')) {
            self.pos += 1;
        }
    }

    fn found(&self) -> String {
        match self.peek() {
            None => "end of input".to_string(),
            Some(c) => format!("{c:?}"),
        }
    }

    /// The error for character `c` where an operator was expected.
    fn unexpected_after_operand(&self, c: char, expected: &'static str) -> ExprError {
        let column = self.column();
        match c {
            '-' => ExprError::Minus { column },
            '/' => ExprError::Divide { column },
            c if c.is_ascii_alphanumeric() || c == '_' || c == '(' || c == ')' => {
                ExprError::ExpectedOperator {
                    column,
                    expected,
                    found: self.found(),
                }
            }
            ch => ExprError::BadChar { column, ch },
        }
    }

    fn check_terms(&self, p: &Poly, column: usize) -> Result<(), ExprError> {
        if p.terms.len() > MAX_TERMS {
            Err(ExprError::TooManyTerms { column })
        } else {
            Ok(())
        }
    }

    fn expr(&mut self) -> Result<Poly, ExprError> {
        let mut acc = self.term()?;
        loop {
            self.skip_spaces();
            if self.peek() != Some('+') {
                return Ok(acc);
            }
            let column = self.column();
            self.pos += 1;
            let rhs = self.term()?;
            acc = acc
                .checked_add(&rhs)
                .ok_or(ExprError::Overflow { column })?;
            self.check_terms(&acc, column)?;
        }
    }

    fn term(&mut self) -> Result<Poly, ExprError> {
        let mut acc = self.factor()?;
        loop {
            self.skip_spaces();
            if self.peek() != Some('*') {
                return Ok(acc);
            }
            let column = self.column();
            self.pos += 1;
            let rhs = self.factor()?;
            if acc.terms.len().saturating_mul(rhs.terms.len()) > MAX_TERMS.saturating_mul(8) {
                return Err(ExprError::TooManyTerms { column });
            }
            acc = acc
                .checked_mul(&rhs)
                .ok_or(ExprError::Overflow { column })?;
            self.check_terms(&acc, column)?;
        }
    }

    fn factor(&mut self) -> Result<Poly, ExprError> {
        self.skip_spaces();
        let column = self.column();
        match self.peek() {
            Some(c) if c.is_ascii_digit() => {
                let start = self.pos;
                while matches!(self.peek(), Some(c) if c.is_ascii_digit()) {
                    self.pos += 1;
                }
                let digits: String = self.chars[start..self.pos].iter().collect();
                let n: u64 = digits
                    .parse()
                    .map_err(|_| ExprError::NumberTooLarge { column })?;
                Ok(Poly::constant(n))
            }
            Some(c) if c.is_ascii_alphabetic() || c == '_' => {
                let start = self.pos;
                while matches!(self.peek(), Some(c) if c.is_ascii_alphanumeric() || c == '_') {
                    self.pos += 1;
                }
                let name: String = self.chars[start..self.pos].iter().collect();
                Ok(Poly::symbol(&name))
            }
            Some('(') => {
                if self.depth >= MAX_DEPTH {
                    return Err(ExprError::TooDeep { column });
                }
                self.depth += 1;
                self.pos += 1;
                let inner = self.expr()?;
                self.skip_spaces();
                match self.peek() {
                    Some(')') => {
                        self.pos += 1;
                        self.depth -= 1;
                        Ok(inner)
                    }
                    Some(c) => Err(self.unexpected_after_operand(c, "')'")),
                    None => Err(ExprError::ExpectedOperator {
                        column: self.column(),
                        expected: "')'",
                        found: self.found(),
                    }),
                }
            }
            Some('-') => Err(ExprError::Minus { column }),
            Some('/') => Err(ExprError::Divide { column }),
            Some(c) if !(c == '+' || c == '*' || c == ')') => {
                Err(ExprError::BadChar { column, ch: c })
            }
            _ => Err(ExprError::ExpectedOperand {
                column,
                found: self.found(),
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> Poly {
        Poly::parse(s).unwrap()
    }

    fn at(poly: &Poly, b: u64, s: u64) -> u64 {
        poly.eval(|n| match n {
            "B" => Some(b),
            "S" => Some(s),
            _ => None,
        })
        .unwrap()
    }

    #[test]
    fn multiplication_binds_tighter_than_addition() {
        assert_eq!(at(&p("2+3*B"), 4, 0), 14);
        assert_eq!(at(&p("(2+3)*B"), 4, 0), 20);
        assert_eq!(p("2+3*B"), p("B*3 + 2"));
    }

    #[test]
    fn spaces_tabs_and_newlines_between_tokens_are_ignored() {
        assert_eq!(p(" 4 *\tB*64 * 112*112\n"), p("4*B*64*112*112"));
        assert_eq!(at(&p("4*B*64*112*112"), 2, 0), 4 * 2 * 64 * 112 * 112);
    }

    #[test]
    fn like_terms_merge_and_products_expand_into_one_canonical_form() {
        let a = p("(B + S) * (B + S)");
        let b = p("B*B + 2*B*S + S*S");
        assert_eq!(a, b);
        assert_eq!(a.to_string(), "2*B*S + B*B + S*S");
        assert_eq!(p("3 + 5*B").to_string(), "3 + 5*B");
        assert_eq!(p("B*S*768*4").to_string(), "3072*B*S");
        assert_eq!(p("0*B").to_string(), "0");
        assert!(p("0*B + 0").is_zero());
        for s in ["B*B*S + 7", "1", "(B+1)*(S+2)*3", "B"] {
            assert_eq!(Poly::parse(&p(s).to_string()).unwrap(), p(s), "{s}");
        }
    }

    #[test]
    fn numbers_up_to_u64_max_parse_and_one_more_is_refused_with_its_column() {
        assert_eq!(p("18446744073709551615").as_constant(), Some(u64::MAX));
        assert_eq!(
            Poly::parse("B + 18446744073709551616"),
            Err(ExprError::NumberTooLarge { column: 5 })
        );
    }

    #[test]
    fn coefficient_overflow_is_an_error_at_the_operator() {
        assert_eq!(
            Poly::parse("4294967296 * 4294967296"),
            Err(ExprError::Overflow { column: 12 })
        );
        assert_eq!(
            Poly::parse("18446744073709551615 + 1"),
            Err(ExprError::Overflow { column: 22 })
        );
        // Within the coefficients, evaluation overflow is reported by eval.
        assert_eq!(p("B*B*B").eval(|_| Some(1 << 22)), Err(None));
    }

    #[test]
    fn bad_characters_are_named_with_their_column() {
        assert_eq!(
            Poly::parse("4*B % 2"),
            Err(ExprError::BadChar { column: 5, ch: '%' })
        );
        assert_eq!(
            Poly::parse("4*$"),
            Err(ExprError::BadChar { column: 3, ch: '$' })
        );
        let e = Poly::parse("4B").unwrap_err();
        assert!(
            matches!(e, ExprError::ExpectedOperator { column: 2, .. }),
            "{e}"
        );
        assert!(e.to_string().contains("column 2"), "{e}");
        assert_eq!(Poly::parse("   "), Err(ExprError::Empty));
        assert!(matches!(
            Poly::parse("B +"),
            Err(ExprError::ExpectedOperand { column: 4, .. })
        ));
        assert!(matches!(
            Poly::parse("(B + 1"),
            Err(ExprError::ExpectedOperator {
                expected: "')'",
                ..
            })
        ));
        assert!(matches!(
            Poly::parse("B)"),
            Err(ExprError::ExpectedOperator { column: 2, .. })
        ));
    }

    #[test]
    fn minus_and_divide_are_refused_saying_why() {
        assert_eq!(Poly::parse("B - 1"), Err(ExprError::Minus { column: 3 }));
        assert_eq!(Poly::parse("-B"), Err(ExprError::Minus { column: 1 }));
        assert_eq!(Poly::parse("B/2"), Err(ExprError::Divide { column: 2 }));
        let msg = Poly::parse("B/2").unwrap_err().to_string();
        assert!(
            msg.contains("monotone") && msg.contains("column 2"),
            "{msg}"
        );
    }

    #[test]
    fn nesting_is_limited_and_the_limit_itself_is_accepted() {
        let ok = format!("{}B{}", "(".repeat(MAX_DEPTH), ")".repeat(MAX_DEPTH));
        assert_eq!(p(&ok), p("B"));
        let deep = format!("{}B{}", "(".repeat(100_000), ")".repeat(100_000));
        assert_eq!(
            Poly::parse(&deep),
            Err(ExprError::TooDeep {
                column: MAX_DEPTH + 1
            })
        );
    }

    #[test]
    fn expansion_beyond_the_term_limit_is_refused() {
        let factor = "(a+b+c+d+e+f+g+h+i+j)";
        let big = [factor; 6].join("*");
        assert!(matches!(
            Poly::parse(&big),
            Err(ExprError::TooManyTerms { .. })
        ));
    }

    #[test]
    fn symbols_are_listed_sorted_once() {
        assert_eq!(p("S*B + B*x_1 + 3").symbols(), vec!["B", "S", "x_1"]);
        assert!(is_symbol_name("_a9") && !is_symbol_name("9a") && !is_symbol_name(""));
    }
}
