//! JSON documents read with the place of an error: which field of which element failed.
//!
//! serde_json says where in the text a document breaks its structure (line and column), which
//! on a plan written on one line, or a graph of thousands of tensors, does not say which
//! tensor, op or instruction is wrong. [`from_str`] reads a document as serde_json does and,
//! on a structure error, names the path to the culprit (`tensors[5].kind`) and, where an
//! element on that path has a name, the element (`tensors[5] ("conv1.out").kind`; inside an
//! element that serde reads by a tag first, such as a plan's instruction by its `op`, serde's
//! path stops at the element, and a wrong value is traced to the one field holding it:
//! `instructions[3] (alloc "x").offset`); a tuple given too many elements (an `inplace` pair of
//! three), which serde_json calls "trailing characters", is a structure error with its path
//! too; a document that is an
//! array where an object is expected is refused with that said, instead of being read field
//! by field in the order of the type's declaration (serde's rule for a sequence given to a
//! struct).
//!
//! Complexity: a document that reads is read once, as serde_json reads it; one with an error
//! is read again with the path tracked, and a third time as a [`serde_json::Value`] to find
//! the element's name.

use serde::de::DeserializeOwned;
use serde_json::{Map, Value};

/// Where and why a JSON document failed to read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JsonError {
    /// 1-based line (of the text given to [`from_str`]).
    pub line: usize,
    /// 1-based column.
    pub column: usize,
    /// What is wrong, starting with the path to the culprit when there is one
    /// (`tensors[5] ("x").kind: unknown variant ...`).
    pub message: String,
    /// Whether the text is well-formed JSON (the error is in the document's structure: a
    /// missing field, a wrong type, an unknown variant) rather than a syntax error.
    pub structure: bool,
}

/// Reads `text` as a `T` that is a JSON object (see the module doc).
pub fn from_str<T: DeserializeOwned>(text: &str) -> Result<T, JsonError> {
    // JSON's whitespace (RFC 8259): space, tab, line feed, carriage return.
    if let Some(at) = text.find(|c: char| !matches!(c, ' ' | '\t' | '\n' | '\r')) {
        if text[at..].starts_with('[') {
            let (line, column) = position(text, at);
            return Err(JsonError {
                line,
                column,
                message: ARRAY.into(),
                structure: true,
            });
        }
    }
    // The plain read first: tracking the path costs about a fifth of a large document's read,
    // so it is done again with the path only when it fails (reading is deterministic: the
    // same error at the same place).
    let plain = match serde_json::from_str::<T>(text) {
        Ok(value) => return Ok(value),
        Err(e) => e,
    };
    let mut de = serde_json::Deserializer::from_str(text);
    let _: T = serde_path_to_error::deserialize(&mut de).map_err(|e| {
        let inner = e.inner();
        let doc: Option<Value> = serde_json::from_str(text).ok();
        // An array longer than the tuple it fills (an `inplace` pair of three) is reported
        // by serde_json as "trailing characters", a syntax error, though the text is
        // well-formed JSON: it is the document's structure that is wrong.
        let structure = inner.classify() == serde_json::error::Category::Data || doc.is_some();
        let mut what = strip_position(&inner.to_string());
        if doc.is_some() && what == "trailing characters" {
            // Worded as serde words it when it reads the same document as a value
            // ([`from_value`]).
            what = match value_at(doc.as_ref(), e.path()).and_then(Value::as_array) {
                Some(items) => format!(
                    "invalid length {}, expected fewer elements in array",
                    items.len()
                ),
                None => "expected fewer elements".to_string(),
            };
        }
        let message = if structure {
            located(doc.as_ref(), e.path(), what)
        } else {
            what
        };
        JsonError {
            line: inner.line(),
            column: inner.column(),
            message,
            structure,
        }
    })?;
    // Trailing characters after the document (or, were the second read to pass, the first
    // read's error as it is).
    let e = de.end().err().unwrap_or(plain);
    Err(JsonError {
        line: e.line(),
        column: e.column(),
        message: strip_position(&e.to_string()),
        structure: e.classify() == serde_json::error::Category::Data,
    })
}

/// What a JSON document says it is: its top-level `format` string, when it is an object
/// that has one naming a kind memplan writes ([`KNOWN_FORMATS`]). For messages when a document
/// of one kind is given where another is expected (a plan for a graph, a symbolic plan for a
/// plan); any other format is left to the reader's own error. Reads the text again, so only on
/// an error path.
pub fn declared_format(text: &str) -> Option<String> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    match serde_json::from_str::<Value>(text).ok()?.get("format")? {
        Value::String(f) if KNOWN_FORMATS.contains(&f.as_str()) => Some(f.clone()),
        _ => None,
    }
}

/// The format string of a graph document (the one definition: [`crate::graph::GRAPH_FORMAT`]
/// names it; this module sits below the document modules, which read through it).
pub const GRAPH: &str = "memplan-graph/1";
/// The format string of a plan document ([`crate::plan::PLAN_FORMAT`]).
pub const PLAN: &str = "memplan-plan/1";
/// The format string of a symbolic plan document
/// ([`crate::symbolic::SYMBOLIC_PLAN_FORMAT`]).
pub const SYMBOLIC_PLAN: &str = "memplan-symbolic-plan/1";

/// The document formats memplan writes and reads.
pub const KNOWN_FORMATS: [&str; 3] = [GRAPH, PLAN, SYMBOLIC_PLAN];

/// What to do with a document of format `found` given where another kind was asked for, as a
/// clause for messages (empty for formats memplan does not write).
pub fn kind_hint(found: &str) -> &'static str {
    match found {
        "memplan-graph/1" => " (a graph: plan it with `memplan plan`)",
        "memplan-plan/1" => " (a plan: check it against its graph with `memplan check`)",
        "memplan-symbolic-plan/1" => {
            " (a symbolic plan: instantiate it at a binding with `memplan instantiate`)"
        }
        _ => "",
    }
}

/// Reads `value` as a `T` that is a JSON object, for documents that arrive inside a larger
/// one already parsed: the message names the path to the culprit as [`from_str`]'s does
/// (without a position, which the value no longer has).
pub fn from_value<T: DeserializeOwned>(value: &Value) -> Result<T, String> {
    if value.is_array() {
        return Err(ARRAY.to_string());
    }
    serde_path_to_error::deserialize(value)
        .map_err(|e| located(Some(value), e.path(), e.inner().to_string()))
}

/// What an array where an object belongs is told.
const ARRAY: &str = "the document is an array; it must be a JSON object ({...})";

/// A JSON object whose keys must differ, at any depth (serde_json's `Map` keeps the last of a
/// key given twice, which would let options `{"budget": "60%", "budget": "100%"}` plan at
/// 100 % without a word): a key given twice is refused as a struct's own fields are
/// (`duplicate field `budget``). The HTTP bodies' and the C API's options are read so.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
#[serde(transparent)]
pub struct UniqueMap(pub Map<String, Value>);

/// A JSON value read with [`UniqueMap`]'s rule inside.
#[derive(Debug, Clone, PartialEq)]
pub struct UniqueValue(pub Value);

impl<'de> serde::Deserialize<'de> for UniqueMap {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        match <UniqueValue as serde::Deserialize>::deserialize(d)?.0 {
            Value::Object(map) => Ok(UniqueMap(map)),
            other => Err(serde::de::Error::invalid_type(
                unexpected(&other),
                &"a JSON object of options",
            )),
        }
    }
}

/// serde's description of a JSON value for a type error.
fn unexpected(v: &Value) -> serde::de::Unexpected<'_> {
    use serde::de::Unexpected;
    match v {
        Value::Null => Unexpected::Unit,
        Value::Bool(b) => Unexpected::Bool(*b),
        Value::Number(n) => match (n.as_u64(), n.as_i64()) {
            (Some(u), _) => Unexpected::Unsigned(u),
            (None, Some(i)) => Unexpected::Signed(i),
            _ => Unexpected::Float(n.as_f64().unwrap_or(f64::NAN)),
        },
        Value::String(s) => Unexpected::Str(s),
        Value::Array(_) => Unexpected::Seq,
        Value::Object(_) => Unexpected::Map,
    }
}

impl<'de> serde::Deserialize<'de> for UniqueValue {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Visit;
        impl<'de> serde::de::Visitor<'de> for Visit {
            type Value = UniqueValue;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("any JSON value")
            }
            fn visit_bool<E>(self, v: bool) -> Result<UniqueValue, E> {
                Ok(UniqueValue(Value::Bool(v)))
            }
            fn visit_i64<E>(self, v: i64) -> Result<UniqueValue, E> {
                Ok(UniqueValue(Value::from(v)))
            }
            fn visit_u64<E>(self, v: u64) -> Result<UniqueValue, E> {
                Ok(UniqueValue(Value::from(v)))
            }
            fn visit_f64<E>(self, v: f64) -> Result<UniqueValue, E> {
                Ok(UniqueValue(Value::from(v)))
            }
            fn visit_str<E>(self, v: &str) -> Result<UniqueValue, E> {
                Ok(UniqueValue(Value::String(v.to_string())))
            }
            fn visit_string<E>(self, v: String) -> Result<UniqueValue, E> {
                Ok(UniqueValue(Value::String(v)))
            }
            fn visit_unit<E>(self) -> Result<UniqueValue, E> {
                Ok(UniqueValue(Value::Null))
            }
            fn visit_none<E>(self) -> Result<UniqueValue, E> {
                Ok(UniqueValue(Value::Null))
            }
            fn visit_some<D2: serde::Deserializer<'de>>(
                self,
                d: D2,
            ) -> Result<UniqueValue, D2::Error> {
                <UniqueValue as serde::Deserialize>::deserialize(d)
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut seq: A,
            ) -> Result<UniqueValue, A::Error> {
                let mut items = Vec::new();
                while let Some(UniqueValue(v)) = seq.next_element()? {
                    items.push(v);
                }
                Ok(UniqueValue(Value::Array(items)))
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut map: A,
            ) -> Result<UniqueValue, A::Error> {
                let mut out = serde_json::Map::new();
                while let Some(key) = map.next_key::<String>()? {
                    if out.contains_key(&key) {
                        return Err(serde::de::Error::custom(format_args!(
                            "duplicate field `{key}`"
                        )));
                    }
                    let UniqueValue(v) = map.next_value()?;
                    out.insert(key, v);
                }
                Ok(UniqueValue(Value::Object(out)))
            }
        }
        d.deserialize_any(Visit)
    }
}

/// Reads `text` as a JSON value whose objects have no key twice ([`UniqueValue`]).
pub fn unique_from_str(text: &str) -> Result<Value, serde_json::Error> {
    serde_json::from_str::<UniqueValue>(text).map(|v| v.0)
}

/// `what` after the path `at`, unless the path is the whole document or `what` already
/// starts with it (a type's own message naming its field).
fn prefixed(at: String, what: String) -> String {
    if at.is_empty() || what.starts_with(&format!("{at}:")) {
        what
    } else {
        format!("{at}: {what}")
    }
}

/// `what` after the path to the culprit in `doc`. Inside an element that serde reads by a
/// tag first (a plan's instruction by its `op`), serde's path stops at the element; an
/// invalid type or value then names the field whose value it is, when exactly one field of
/// the element holds that value.
fn located(doc: Option<&Value>, path: &serde_path_to_error::Path, what: String) -> String {
    // An element with a labelling field given twice is not labelled: the parsed value holds
    // the last of the two, which serde has not read yet (`tensors[1] ("c")` for `"name":
    // "b", "name": "c"` would name the tensor by the name refused).
    let label_twice = ["name", "op", "tensor", "node"]
        .iter()
        .any(|k| what == format!("duplicate field `{k}`"));
    let mut at = named(doc, path, !label_twice);
    let element = value_at(doc, path);
    if let Some(field) = element.and_then(|v| field_holding(v, &what)) {
        if !at.is_empty() {
            at.push('.');
        }
        at.push_str(&field);
    }
    prefixed(at, what)
}

/// The one field of the tagged object `element` whose value is the unexpected value serde's
/// message `what` names (`invalid type: string "x", expected u64`), if exactly one is.
fn field_holding(element: &Value, what: &str) -> Option<String> {
    let fields = element.as_object().filter(|o| o.contains_key("op"))?;
    let rest = what
        .strip_prefix("invalid type: ")
        .or_else(|| what.strip_prefix("invalid value: "))?;
    let unexpected = &rest[..rest.rfind(", expected ")?];
    // serde_json's text reader and serde write some floats differently (`1e20`,
    // `1.8446744073709552e+19` for an integer past u64): a float is compared by value.
    let float = unexpected
        .strip_prefix("floating point `")
        .and_then(|f| f.strip_suffix('`'))
        .and_then(|f| f.parse::<f64>().ok());
    let holds = |value: &Value| {
        unexpected_text(value) == unexpected
            || float.is_some_and(|f| value.is_f64() && value.as_f64() == Some(f))
    };
    let mut holding = fields
        .iter()
        .filter(|(key, value)| key.as_str() != "op" && holds(value))
        .map(|(key, _)| key);
    match (holding.next(), holding.next()) {
        (Some(key), None) => Some(key.clone()),
        _ => None,
    }
}

/// A JSON value as serde's `Unexpected` writes it in its messages (serde_json's reader
/// says `null` where serde says "unit value").
fn unexpected_text(value: &Value) -> String {
    match value {
        Value::Null => "null".to_string(),
        other => unexpected(other).to_string(),
    }
}

/// Line and column (1-based) of byte `offset` in `text`.
pub fn position(text: &str, offset: usize) -> (usize, usize) {
    let before = &text[..offset.min(text.len())];
    let line = before.matches('\n').count() + 1;
    let column = before.len() - before.rfind('\n').map_or(0, |i| i + 1) + 1;
    (line, column)
}

/// serde_json appends " at line L column C" to its messages; the position is given apart.
pub fn strip_position(msg: &str) -> String {
    match msg.rfind(" at line ") {
        Some(i) => msg[..i].to_string(),
        None => msg.to_string(),
    }
}

/// The path as text, each array element followed by its name in `doc` where it has one
/// (the last element only when `label_last`): `ops[3] ("fc").inputs[0]`; empty for the
/// whole document.
fn named(doc: Option<&Value>, path: &serde_path_to_error::Path, label_last: bool) -> String {
    use serde_path_to_error::Segment;
    let mut at = doc;
    let mut out = String::new();
    let last = path.iter().count().saturating_sub(1);
    for (i, seg) in path.iter().enumerate() {
        match seg {
            Segment::Seq { index } => {
                out.push_str(&format!("[{index}]"));
                at = at.and_then(|v| v.get(*index));
                if let Some(label) = at.filter(|_| label_last || i < last).and_then(label) {
                    out.push_str(&format!(" ({label})"));
                }
            }
            Segment::Map { key } => {
                if !out.is_empty() {
                    out.push('.');
                }
                out.push_str(key);
                at = at.and_then(|v| v.get(key.as_str()));
            }
            Segment::Enum { variant } => {
                if !out.is_empty() {
                    out.push('.');
                }
                out.push_str(variant);
            }
            Segment::Unknown => {
                if !out.is_empty() {
                    out.push('.');
                }
                out.push('?');
            }
        }
    }
    out
}

/// The element of `doc` at `path`, where the path leads to one.
fn value_at<'a>(doc: Option<&'a Value>, path: &serde_path_to_error::Path) -> Option<&'a Value> {
    use serde_path_to_error::Segment;
    path.iter().try_fold(doc?, |at, seg| match seg {
        Segment::Seq { index } => at.get(*index),
        Segment::Map { key } => at.get(key.as_str()),
        Segment::Enum { .. } | Segment::Unknown => None,
    })
}

/// The first place where two JSON documents differ, as a path in the style of this module's
/// errors (`ops[3] ("conv1@s0").attrs.padding`) with what each side holds there (`expected`
/// is `a`'s value, `found` is `b`'s; a value over 80 characters is shortened, a missing key
/// or element said so); `None` when they are equal. Objects are compared key by key in key
/// order, arrays element by element. Linear in the documents' size.
pub fn first_difference(a: &Value, b: &Value) -> Option<String> {
    fn show(v: Option<&Value>) -> String {
        match v {
            None => "nothing".to_string(),
            Some(v) => {
                let text = v.to_string();
                match text.char_indices().nth(80) {
                    Some((i, _)) => format!("{}…", &text[..i]),
                    None => text,
                }
            }
        }
    }
    fn here(path: &str, x: Option<&Value>, y: Option<&Value>) -> Option<String> {
        let at = if path.is_empty() {
            "the document"
        } else {
            path
        };
        Some(format!("{at}: expected {}, found {}", show(x), show(y)))
    }
    /// The first difference under one key or element (`path` names it, and is cut back to
    /// `len` when there is none).
    fn child(
        x: Option<&Value>,
        y: Option<&Value>,
        path: &mut String,
        len: usize,
    ) -> Option<String> {
        let found = match (x, y) {
            (Some(u), Some(v)) => walk(u, v, path),
            (u, v) => here(path, u, v),
        };
        if found.is_none() {
            path.truncate(len);
        }
        found
    }
    fn walk(a: &Value, b: &Value, path: &mut String) -> Option<String> {
        match (a, b) {
            (Value::Object(x), Value::Object(y)) => {
                let keys: std::collections::BTreeSet<&String> = x.keys().chain(y.keys()).collect();
                for k in keys {
                    let len = path.len();
                    if !path.is_empty() {
                        path.push('.');
                    }
                    path.push_str(k);
                    if let Some(found) = child(x.get(k), y.get(k), path, len) {
                        return Some(found);
                    }
                }
                None
            }
            (Value::Array(x), Value::Array(y)) => {
                for i in 0..x.len().max(y.len()) {
                    let len = path.len();
                    path.push_str(&format!("[{i}]"));
                    let (lx, ly) = (x.get(i).and_then(label), y.get(i).and_then(label));
                    // Two elements that name themselves apart differ as elements: say both
                    // names, not a field of one of them.
                    if let (Some(lx), Some(ly)) = (&lx, &ly) {
                        if lx != ly {
                            return Some(format!("{path}: expected {lx}, found {ly}"));
                        }
                    }
                    if let Some(l) = lx.or(ly) {
                        path.push_str(&format!(" ({l})"));
                    }
                    if let Some(found) = child(x.get(i), y.get(i), path, len) {
                        return Some(found);
                    }
                }
                None
            }
            _ if a == b => None,
            _ => here(path, Some(a), Some(b)),
        }
    }
    walk(a, b, &mut String::new())
}

/// How an element of a document names itself: a tensor or op by `name`, an instruction by
/// its `op` and `tensor` or `node`.
fn label(v: &Value) -> Option<String> {
    let s = |k: &str| v.get(k).and_then(Value::as_str);
    if let Some(n) = s("name") {
        return Some(format!("{n:?}"));
    }
    match (s("op"), s("tensor").or(s("node"))) {
        (Some(op), Some(of)) => Some(format!("{op} {of:?}")),
        (None, Some(of)) => Some(format!("{of:?}")),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_difference_is_named_by_its_path_and_both_values() {
        let a = serde_json::json!({"ops": [{"name": "a", "size": 1}, {"name": "b", "attrs": {"p": [1, 1]}}]});
        assert_eq!(first_difference(&a, &a), None);
        let mut b = a.clone();
        b["ops"][1]["attrs"]["p"][1] = serde_json::json!(0);
        assert_eq!(
            first_difference(&a, &b).unwrap(),
            "ops[1] (\"b\").attrs.p[1]: expected 1, found 0"
        );
        b["ops"][0]["extra"] = serde_json::json!(true);
        assert_eq!(
            first_difference(&a, &b).unwrap(),
            "ops[0] (\"a\").extra: expected nothing, found true"
        );
        // Elements that name themselves apart are named, not a field of one of them.
        let swapped = serde_json::json!({"ops": [{"name": "b", "attrs": {"p": [1, 1]}}, {"name": "a", "size": 1}]});
        assert_eq!(
            first_difference(&a, &swapped).unwrap(),
            "ops[0]: expected \"a\", found \"b\""
        );
        let c = serde_json::json!({"ops": [{"name": "a", "size": 1}]});
        assert!(first_difference(&a, &c)
            .unwrap()
            .starts_with("ops[1] (\"b\"): expected {"));
        let long = serde_json::json!("x".repeat(200));
        assert!(first_difference(&long, &serde_json::json!(1))
            .unwrap()
            .contains("…, found 1"));
    }
    use serde::Deserialize;

    #[derive(Debug, Deserialize)]
    #[allow(dead_code)]
    struct Doc {
        name: String,
        items: Vec<Item>,
    }

    #[derive(Debug, Deserialize)]
    #[allow(dead_code)]
    struct Item {
        name: String,
        size: u64,
    }

    #[test]
    fn a_wrong_field_is_named_by_its_path_and_its_element() {
        let text = "{\"name\": \"d\", \"items\": [\n {\"name\": \"a\", \"size\": 1},\n {\"name\": \"b\", \"size\": -4}]}";
        let e = from_str::<Doc>(text).unwrap_err();
        assert_eq!((e.line, e.column), (3, 25));
        assert!(e.structure);
        assert_eq!(
            e.message,
            "items[1] (\"b\").size: invalid value: integer `-4`, expected u64"
        );
    }

    #[test]
    fn an_element_with_a_field_given_twice_is_not_labelled_by_the_refused_value() {
        let text = r#"{"name": "d", "items": [{"name": "a", "size": 1}, {"name": "b", "name": "c", "size": 2}]}"#;
        let e = from_str::<Doc>(text).unwrap_err();
        assert_eq!(e.message, "items[1]: duplicate field `name`");
        assert!(e.structure);
        // Another field given twice keeps the element's name.
        let text = r#"{"name": "d", "items": [{"name": "a", "size": 1, "size": 2}]}"#;
        let e = from_str::<Doc>(text).unwrap_err();
        assert_eq!(e.message, "items[0] (\"a\"): duplicate field `size`");
    }

    #[test]
    fn a_syntax_error_has_no_path_and_is_not_a_structure_error() {
        let e = from_str::<Doc>("{\"name\": \"d\", \"items\": [}").unwrap_err();
        assert!(!e.structure);
        assert!(!e.message.contains("items"), "{}", e.message);
        let trailing = from_str::<Doc>("{\"name\": \"d\", \"items\": []} x").unwrap_err();
        assert!(!trailing.structure);
        assert!(
            trailing.message.contains("trailing"),
            "{}",
            trailing.message
        );
    }

    #[derive(Debug, Deserialize)]
    #[allow(dead_code)]
    struct Pairs {
        name: String,
        pairs: Vec<(usize, usize)>,
    }

    #[test]
    fn a_tuple_given_too_many_elements_is_a_structure_error_with_its_path() {
        // serde_json reports it as "trailing characters", a syntax error, without a path.
        let e = from_str::<Pairs>("{\"name\": \"p\", \"pairs\": [[0, 1], [0, 0, 1]]}").unwrap_err();
        assert!(e.structure);
        assert_eq!(
            e.message,
            "pairs[1]: invalid length 3, expected fewer elements in array"
        );
        // The same words as when the document is read as a value.
        let v = serde_json::json!({"name": "p", "pairs": [[0, 1], [0, 0, 1]]});
        assert_eq!(from_value::<Pairs>(&v).unwrap_err(), e.message);
        let short = from_str::<Pairs>("{\"name\": \"p\", \"pairs\": [[0]]}").unwrap_err();
        assert!(short.structure && short.message.starts_with("pairs[0]: invalid length 1"));
    }

    #[test]
    fn an_array_is_refused_where_an_object_is_read() {
        // serde would read it field by field in declaration order.
        let e = from_str::<Doc>("\n  [\"d\", []]").unwrap_err();
        assert_eq!((e.line, e.column, e.structure), (2, 3, true));
        assert!(e.message.contains("must be a JSON object"), "{}", e.message);
    }

    #[test]
    fn a_value_is_read_with_the_same_paths_and_arrays_refused() {
        let v = serde_json::json!({"name": "d", "items": [{"name": "a", "size": "4"}]});
        let e = from_value::<Doc>(&v).unwrap_err();
        assert_eq!(
            e,
            "items[0] (\"a\").size: invalid type: string \"4\", expected u64"
        );
        let e = from_value::<Doc>(&serde_json::json!(["d", []])).unwrap_err();
        assert!(e.contains("must be a JSON object"), "{e}");
        assert!(from_value::<Doc>(&serde_json::json!({"name": "d", "items": []})).is_ok());
    }

    #[test]
    fn a_message_that_names_its_field_is_not_prefixed_twice() {
        assert_eq!(
            prefixed("budget".into(), "budget: too small".into()),
            "budget: too small"
        );
        assert_eq!(
            prefixed("budget".into(), "too small".into()),
            "budget: too small"
        );
        assert_eq!(
            prefixed(String::new(), "missing field".into()),
            "missing field"
        );
    }

    #[test]
    fn only_json_whitespace_may_come_before_an_array_refused_as_such() {
        // A form feed is no JSON whitespace: a syntax error, not "an array".
        let e = from_str::<Doc>("\u{c}[1]").unwrap_err();
        assert!(
            !e.structure && !e.message.contains("array"),
            "{}",
            e.message
        );
        let e = from_str::<Doc>(" \t\r\n[1]").unwrap_err();
        assert!(e.structure && e.message.contains("array"), "{}", e.message);
    }

    #[test]
    fn a_missing_field_at_the_top_has_no_path() {
        let e = from_str::<Doc>("{\"name\": \"d\"}").unwrap_err();
        assert_eq!(e.message, "missing field `items`");
    }

    #[derive(Debug, Deserialize)]
    #[allow(dead_code)]
    struct Stream {
        instructions: Vec<Step>,
    }

    #[derive(Debug, Deserialize)]
    #[serde(tag = "op", rename_all = "snake_case")]
    #[allow(dead_code)]
    enum Step {
        Alloc { tensor: String, offset: u64 },
        Free { tensor: String },
    }

    #[test]
    fn a_wrong_field_of_a_tagged_element_is_named_when_one_field_holds_the_value() {
        let text = r#"{"instructions": [{"op": "free", "tensor": "a"},
            {"op": "alloc", "tensor": "x", "offset": "12"}]}"#;
        let e = from_str::<Stream>(text).unwrap_err();
        assert_eq!(
            e.message,
            "instructions[1] (alloc \"x\").offset: invalid type: string \"12\", expected u64"
        );
        let negative = r#"{"instructions": [{"op": "alloc", "tensor": "x", "offset": -3}]}"#;
        let e = from_str::<Stream>(negative).unwrap_err();
        assert!(
            e.message
                .starts_with("instructions[0] (alloc \"x\").offset: invalid value: integer `-3`"),
            "{}",
            e.message
        );
        let float =
            serde_json::json!({"instructions": [{"op": "alloc", "tensor": "x", "offset": 1.5}]});
        let e = from_value::<Stream>(&float).unwrap_err();
        assert!(
            e.starts_with(
                "instructions[0] (alloc \"x\").offset: invalid type: floating point `1.5`"
            ),
            "{e}"
        );
        // Floats that serde_json's reader and serde write differently are traced by value.
        for big in ["18446744073709551616", "1e20"] {
            let text = format!(
                r#"{{"instructions": [{{"op": "alloc", "tensor": "x", "offset": {big}}}]}}"#
            );
            let e = from_str::<Stream>(&text).unwrap_err();
            assert!(
                e.message.starts_with(
                    "instructions[0] (alloc \"x\").offset: invalid type: floating point"
                ),
                "{big}: {}",
                e.message
            );
        }
        // Two fields hold the value: the path stops at the element, as serde's does.
        let both = r#"{"instructions": [{"op": "alloc", "tensor": 7, "offset": 7}]}"#;
        let e = from_str::<Stream>(both).unwrap_err();
        assert!(
            e.message
                .starts_with("instructions[0]: invalid type: integer `7`"),
            "{}",
            e.message
        );
    }

    #[test]
    fn instructions_are_named_by_their_op_and_tensor() {
        let v: Value = serde_json::json!({"op": "alloc", "tensor": "x"});
        assert_eq!(label(&v).as_deref(), Some("alloc \"x\""));
        let v: Value = serde_json::json!({"op": "exec", "node": "conv"});
        assert_eq!(label(&v).as_deref(), Some("exec \"conv\""));
        assert_eq!(label(&serde_json::json!(3)), None);
    }
}
