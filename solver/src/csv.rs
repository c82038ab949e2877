//! The minimalloc buffer CSV (docs/FORMATS.md §3): header `id,lower,upper,size` with optional
//! `alignment` and `offset` columns, in any column order; lifetimes are half-open
//! `[lower, upper)`. Reading reports the line and column of every error. An id holding a
//! comma, a double quote or surrounding spaces is written quoted as RFC 4180 says (`"a,b"`,
//! `"say ""hi"""`) and read back the same; ids never hold a line break (refused on input).

use crate::problem::{Buffer, Lifetime, Placement, PlacementProblem};
use std::fmt::Write as _;
use thiserror::Error;

/// A parsed buffer CSV: ids (kept as text, in file order), the problem, and the offsets if the
/// file carried an `offset` column.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BufferCsv {
    /// The `id` of each buffer, by index.
    pub ids: Vec<String>,
    /// Buffers by index (capacity unset).
    pub problem: PlacementProblem,
    /// Offsets when the file had an `offset` column with a value on every row (an offset
    /// column left empty on every row, a template for the answer, reads as none).
    pub offsets: Option<Placement>,
    /// The 1-based line of each buffer's row, by index (for messages).
    pub lines: Vec<usize>,
    /// The file's columns as read, without its `offset` column ([`write_table`] writes them
    /// back with the offsets: the same CSV with an offset column).
    pub table: Table,
}

/// The columns of a buffer CSV as read: header names as written (trimmed) and each row's
/// fields (unquoted; the columns memplan reads trimmed, the others as written), in file
/// order, without an `offset` column.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Table {
    /// Column names.
    pub header: Vec<String>,
    /// One row of fields per buffer, by index.
    pub rows: Vec<Vec<String>>,
    /// Where the file's `offset` column stood among [`Self::header`] (the index it is written
    /// back at); `None`: the file had none, and it is written last.
    pub offset_at: Option<usize>,
}

/// An error in a buffer CSV.
#[derive(Debug, Clone, Error, PartialEq, Eq)]
pub enum CsvError {
    /// The file is empty.
    #[error("buffer CSV is empty: expected a header `id,lower,upper,size`")]
    Empty,
    /// A required column is missing from the header.
    #[error("header lacks column `{column}` (need id, lower, upper, size; read: {read})")]
    MissingColumn {
        /// The column missing.
        column: &'static str,
        /// The header's column names as read, each in backquotes, control characters escaped.
        read: String,
    },
    /// The header is MiniMalloc's newer `buffer,start,end` form, whose `end` is ambiguous.
    #[error(
        "header `{0}` uses MiniMalloc's newer column names (`buffer`, `start`, `end`); memplan \
         reads `id,lower,upper,size` with half-open lifetimes [lower, upper): rename the columns \
         (MiniMalloc's own reader takes `end` as inclusive, upper = end + 1; check which your \
         file means)"
    )]
    NewerHeader(String),
    /// A header names a column twice.
    #[error("header names column `{0}` twice")]
    DuplicateColumn(String),
    /// The first line holds numbers, not column names.
    #[error(
        "line {line} is not a header: `{text}` holds numbers where the column names belong; \
         the first line must name the columns (`id,lower,upper,size`, optionally \
         `alignment`, `offset` and columns of your own)"
    )]
    NoHeader {
        /// 1-based line number.
        line: usize,
        /// The line, control characters escaped.
        text: String,
    },
    /// A row has the wrong number of fields.
    #[error("line {line}: expected {expected} fields, found {found}")]
    FieldCount {
        /// 1-based line number.
        line: usize,
        /// Fields in the header.
        expected: usize,
        /// Fields in the row.
        found: usize,
    },
    /// A field is not a non-negative integer.
    #[error("line {line}, column `{column}`: `{value}` is not a non-negative integer")]
    NotInteger {
        /// 1-based line number.
        line: usize,
        /// Column name.
        column: String,
        /// The text found.
        value: String,
    },
    /// A quoted field is not closed, or text follows its closing quote.
    #[error("line {line}: a quoted field is not closed by a lone `\"` at its end")]
    Quote {
        /// 1-based line number.
        line: usize,
    },
    /// A row breaks a rule (size 0, empty lifetime, bad alignment, duplicate id, or the
    /// buffers alive with it need more than a 64-bit arena).
    #[error("line {line} (buffer `{id}`): {rule}")]
    Rule {
        /// 1-based line number.
        line: usize,
        /// The buffer id.
        id: String,
        /// The rule broken.
        rule: String,
    },
}

/// Parses a buffer CSV. `default_alignment` applies when the file has no `alignment` column.
/// A leading UTF-8 byte order mark (spreadsheets write one) is ignored.
pub fn parse(text: &str, default_alignment: u64) -> Result<BufferCsv, CsvError> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let mut lines = text
        .lines()
        .enumerate()
        .map(|(i, l)| (i + 1, l))
        .filter(|(_, l)| !l.trim().is_empty());
    let (header_line, header) = lines.next().ok_or(CsvError::Empty)?;
    let header = header.trim();
    // The header is a CSV row like any other: a quoted name is unquoted (`"tag"` is `tag`,
    // `"my,note"` one name).
    let names = split_row(header)
        .ok_or(CsvError::Quote { line: header_line })?
        .0;
    let cols: Vec<String> = names.iter().map(|c| c.to_ascii_lowercase()).collect();
    let known = ["id", "lower", "upper", "size", "alignment", "offset"];
    if !cols.iter().any(|c| known.contains(&c.as_str()))
        && cols
            .iter()
            .any(|c| !c.is_empty() && c.bytes().all(|b| b.is_ascii_digit()))
    {
        return Err(CsvError::NoHeader {
            line: header_line,
            text: escaped(header),
        });
    }
    for (i, c) in cols.iter().enumerate() {
        if cols[..i].contains(c) {
            return Err(CsvError::DuplicateColumn(escaped(c)));
        }
    }
    let find = |name: &str| cols.iter().position(|c| c == name);
    let need = |column: &'static str| {
        find(column).ok_or_else(|| CsvError::MissingColumn {
            column,
            read: names
                .iter()
                .map(|n| format!("`{}`", escaped(n)))
                .collect::<Vec<_>>()
                .join(", "),
        })
    };
    if find("id").is_none() && (find("buffer").is_some() || find("buffer_id").is_some()) {
        return Err(CsvError::NewerHeader(escaped(header)));
    }
    let (c_id, c_lo, c_hi, c_size) = (need("id")?, need("lower")?, need("upper")?, need("size")?);
    let (c_align, c_off) = (find("alignment"), find("offset"));
    // Columns memplan reads are trimmed; the others are kept as written.
    let read = [Some(c_id), Some(c_lo), Some(c_hi), Some(c_size), c_align];
    let kept = |fields: &[String], raw: &[String]| -> Vec<String> {
        (0..fields.len())
            .filter(|&c| Some(c) != c_off)
            .map(|c| {
                if read.contains(&Some(c)) {
                    fields[c].clone()
                } else {
                    raw[c].clone()
                }
            })
            .collect()
    };
    let mut table = Table {
        header: kept(&names, &names),
        rows: Vec::new(),
        offset_at: c_off,
    };
    let mut ids = Vec::new();
    let mut buffers = Vec::new();
    // The offsets given, and the first row (its index) that leaves its offset empty.
    let mut offsets = Vec::new();
    let mut empty_offset = None;
    let mut lines_of = Vec::new();
    let mut seen = std::collections::BTreeMap::new();
    for (line, row) in lines {
        let (fields, raw) = split_row(row).ok_or(CsvError::Quote { line })?;
        if fields.len() != cols.len() {
            return Err(CsvError::FieldCount {
                line,
                expected: cols.len(),
                found: fields.len(),
            });
        }
        let num = |c: usize| -> Result<u64, CsvError> {
            fields[c].parse::<u64>().map_err(|_| CsvError::NotInteger {
                line,
                column: escaped(&cols[c]),
                value: escaped(&fields[c]),
            })
        };
        let id = fields[c_id].to_string();
        let rule = |rule: String| CsvError::Rule {
            line,
            id: escaped(&id),
            rule,
        };
        let (lo, hi, size) = (num(c_lo)?, num(c_hi)?, num(c_size)?);
        let alignment = match c_align {
            Some(c) => num(c)?,
            None => default_alignment,
        };
        let buffer = check_buffer(lo, hi, size, alignment).map_err(rule)?;
        if let Some(first) = seen.insert(id.clone(), line) {
            return Err(rule(format!("id already used on line {first}")));
        }
        if let Some(c) = c_off {
            if fields[c].is_empty() {
                empty_offset.get_or_insert(ids.len());
            } else {
                offsets.push(num(c)?);
            }
        }
        table.rows.push(kept(&fields, &raw));
        ids.push(id);
        buffers.push(buffer);
        lines_of.push(line);
    }
    if let (Some(i), false) = (empty_offset, offsets.is_empty()) {
        return Err(CsvError::Rule {
            line: lines_of[i],
            id: escaped(&ids[i]),
            rule: "its offset is empty while other rows give one: give every offset, or none \
                   (an offset column left empty on every row is a template for the answer)"
                .into(),
        });
    }
    let problem = PlacementProblem::new(buffers);
    if let Some((step, i, bytes)) = problem.address_space_overflow() {
        return Err(CsvError::Rule {
            line: lines_of[i],
            id: escaped(&ids[i]),
            rule: too_large(step, bytes),
        });
    }
    Ok(BufferCsv {
        ids,
        problem,
        offsets: (c_off.is_some() && empty_offset.is_none()).then_some(Placement { offsets }),
        lines: lines_of,
        table,
    })
}

/// What a placement error says about the buffers of a list (`ids` by index): an overflow
/// (`offset + size` past `u64`, which only huge sizes and alignments cause) names the buffer
/// by its id, size and alignment; any other error as it is.
pub fn placement_error(
    e: &crate::problem::PlacementError,
    ids: &[String],
    problem: &PlacementProblem,
) -> String {
    match *e {
        crate::problem::PlacementError::Overflow { index } => {
            let id = ids.get(index).map_or("?", String::as_str);
            let (size, alignment) = problem
                .buffers
                .get(index)
                .map_or((0, 1), |b| (b.size, b.alignment));
            format!(
                "buffer `{}` (size {size}, alignment {alignment}): offset + size overflows u64 \
                 with that alignment; use a smaller alignment",
                escaped(id)
            )
        }
        ref other => other.to_string(),
    }
}

/// `text` for a message: control characters escaped as Rust's `escape_default` writes them (a
/// tab `\t`, a NUL byte `\u{0}`), everything else as it is.
pub fn escaped(text: &str) -> String {
    text.chars()
        .map(|c| {
            if c.is_control() {
                c.escape_default().to_string()
            } else {
                c.to_string()
            }
        })
        .collect()
}

/// One buffer of a JSON buffer list (`POST /v1/place`, Python's `memplan.place`): id,
/// lifetime `[lower, upper)`, size in bytes and its own alignment, if any.
pub type BufferRow = (String, u64, u64, u64, Option<u64>);

/// Buffers from rows, each checked by [`check_buffer`] (a row without an alignment takes
/// `default_alignment`), ids unique: the ids and the problem (capacity unset), or the first
/// broken rule as `buffers[i] (buffer `id`): rule`.
pub fn from_rows(
    rows: impl IntoIterator<Item = BufferRow>,
    default_alignment: u64,
) -> Result<(Vec<String>, PlacementProblem), String> {
    let mut seen = std::collections::BTreeMap::new();
    let (mut ids, mut buffers) = (Vec::new(), Vec::new());
    for (i, (id, lower, upper, size, alignment)) in rows.into_iter().enumerate() {
        let buffer = check_buffer(lower, upper, size, alignment.unwrap_or(default_alignment))
            .map_err(|rule| format!("buffers[{i}] (buffer `{id}`): {rule}"))?;
        if id.contains(['\n', '\r']) {
            return Err(format!(
                "buffers[{i}] (buffer {id:?}): an id may not hold a line break (it could not \
                 be written as a CSV row)"
            ));
        }
        if let Some(first) = seen.insert(id.clone(), i) {
            return Err(format!(
                "buffers[{i}] (buffer `{id}`): id already used by buffers[{first}]"
            ));
        }
        ids.push(id);
        buffers.push(buffer);
    }
    let problem = PlacementProblem::new(buffers);
    if let Some((step, i, bytes)) = problem.address_space_overflow() {
        return Err(format!(
            "buffers[{i}] (buffer `{}`): {}",
            ids[i],
            too_large(step, bytes)
        ));
    }
    Ok((ids, problem))
}

/// The rule a buffer list breaks when the buffers alive together at `step` need `bytes`, more
/// than a 64-bit arena holds.
fn too_large(step: u64, bytes: u128) -> String {
    format!(
        "with it the buffers alive at step {step} need {bytes} B together, more than a 64-bit \
         arena holds (2^64 - 1 B): no placement exists"
    )
}

/// The rules of one buffer row (size > 0, a non-empty lifetime `[lower, upper)`, a power-of-two
/// alignment): the buffer, or the rule it breaks. Shared by every reader of buffer lists.
pub fn check_buffer(lower: u64, upper: u64, size: u64, alignment: u64) -> Result<Buffer, String> {
    if size == 0 {
        return Err("size must be > 0".into());
    }
    if upper <= lower {
        return Err(format!(
            "lifetime [{lower}, {upper}) is empty (need lower < upper)"
        ));
    }
    if !alignment.is_power_of_two() {
        return Err(format!("alignment {alignment} is not a power of two"));
    }
    Ok(Buffer {
        lifetime: Lifetime::new(lower, upper),
        size,
        alignment,
    })
}

/// Writes `id,lower,upper,size[,alignment],offset` rows (alignment only when some buffer
/// needs more than 1).
pub fn write(ids: &[String], problem: &PlacementProblem, placement: &Placement) -> String {
    rows(ids, problem, Some(placement))
}

/// Writes `table` (a file's columns as read, [`BufferCsv::table`]) back with an `offset`
/// column: the same CSV with an offset column (FORMATS §3), extra columns and column order
/// kept, fields quoted where they need it. Where the file had no `alignment` column but some
/// buffer of `problem` needs more than 1 (`--alignment`), that column goes before the offsets,
/// so the file says what they honour.
pub fn write_table(table: &Table, problem: &PlacementProblem, placement: &Placement) -> String {
    let has_align = table
        .header
        .iter()
        .any(|c| c.eq_ignore_ascii_case("alignment"));
    let add_align = !has_align && problem.buffers.iter().any(|b| b.alignment > 1);
    // The offset column (after the added alignment column) goes where the file had its own,
    // else last.
    let at = table.offset_at.unwrap_or(table.header.len());
    let line = |fields: &[String], align: String, offset: String| -> String {
        let mut cells: Vec<String> = fields.iter().map(|f| field(f).into_owned()).collect();
        let mut new = Vec::new();
        if add_align {
            new.push(align);
        }
        new.push(offset);
        let k = at.min(cells.len());
        cells.splice(k..k, new);
        let mut l = cells.join(",");
        l.push('\n');
        l
    };
    let mut out = line(&table.header, "alignment".into(), "offset".into());
    for ((row, b), off) in table
        .rows
        .iter()
        .zip(&problem.buffers)
        .zip(&placement.offsets)
    {
        out.push_str(&line(row, b.alignment.to_string(), off.to_string()));
    }
    out
}

/// Writes `id,lower,upper,size[,alignment]` rows: the buffers without offsets, a problem to
/// solve (alignment only when some buffer needs more than 1).
pub fn write_buffers(ids: &[String], problem: &PlacementProblem) -> String {
    rows(ids, problem, None)
}

/// The fields of one CSV row, twice: unquoted ones trimmed, and as written (untrimmed);
/// quoted ones (RFC 4180) as written between the quotes with `""` read as `"` in both.
/// `None` when a quote is not closed or text follows a closing quote.
fn split_row(row: &str) -> Option<(Vec<String>, Vec<String>)> {
    let mut fields = Vec::new();
    let mut raw = Vec::new();
    let mut rest = row;
    loop {
        let t = rest.trim_start();
        if let Some(quoted) = t.strip_prefix('"') {
            let mut field = String::new();
            let mut chars = quoted.char_indices();
            let after = loop {
                match chars.next()? {
                    (i, '"') if quoted[i + 1..].starts_with('"') => {
                        field.push('"');
                        chars.next();
                    }
                    (i, '"') => break &quoted[i + 1..],
                    (_, c) => field.push(c),
                }
            };
            raw.push(field.clone());
            fields.push(field);
            let after = after.trim_start();
            match after.strip_prefix(',') {
                Some(r) => rest = r,
                None if after.is_empty() => return Some((fields, raw)),
                None => return None,
            }
        } else {
            let (f, next) = match rest.split_once(',') {
                Some((f, r)) => (f, Some(r)),
                None => (rest, None),
            };
            fields.push(f.trim().to_string());
            raw.push(f.to_string());
            match next {
                Some(r) => rest = r,
                None => return Some((fields, raw)),
            }
        }
    }
}

/// `id` as a CSV field: quoted (RFC 4180) when it holds a comma or a double quote or starts
/// or ends with a space, so that [`parse`] reads it back unchanged.
fn field(id: &str) -> std::borrow::Cow<'_, str> {
    if id.contains([',', '"']) || id.trim() != id {
        format!("\"{}\"", id.replace('"', "\"\"")).into()
    } else {
        id.into()
    }
}

fn rows(ids: &[String], problem: &PlacementProblem, placement: Option<&Placement>) -> String {
    let with_align = problem.buffers.iter().any(|b| b.alignment > 1);
    let mut out = String::from("id,lower,upper,size");
    if with_align {
        out.push_str(",alignment");
    }
    out.push_str(if placement.is_some() {
        ",offset\n"
    } else {
        "\n"
    });
    let rows = placement.map_or(usize::MAX, |p| p.offsets.len());
    for (i, (id, b)) in ids.iter().zip(&problem.buffers).take(rows).enumerate() {
        let _ = write!(
            out,
            "{},{},{},{}",
            field(id),
            b.lifetime.start,
            b.lifetime.end,
            b.size
        );
        if with_align {
            let _ = write!(out, ",{}", b.alignment);
        }
        if let Some(off) = placement.and_then(|p| p.offsets.get(i)) {
            let _ = write!(out, ",{off}");
        }
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_solution_is_the_same_csv_with_an_offset_column() {
        // Column order, an extra column, an all-1 alignment column and a quoted id are kept;
        // an offset column read is replaced by the new one.
        let text = "\u{feff}size,id,note,lower,upper,alignment,offset\r\n\
                    10,a,first,0,2,1,99\r\n\
                    20,\"b,c\",\"say \"\"hi\"\"\",1,3,1,7\r\n";
        let parsed = parse(text, 1).unwrap();
        let placement = Placement {
            offsets: vec![0, 10],
        };
        let out = write_table(&parsed.table, &parsed.problem, &placement);
        assert_eq!(
            out,
            "size,id,note,lower,upper,alignment,offset\n\
             10,a,first,0,2,1,0\n\
             20,\"b,c\",\"say \"\"hi\"\"\",1,3,1,10\n"
        );
        let back = parse(&out, 1).unwrap();
        assert_eq!(back.ids, parsed.ids);
        assert_eq!(back.problem, parsed.problem);
        assert_eq!(back.offsets, Some(placement));
        // Without an alignment column, a default alignment above 1 is written before the
        // offsets.
        let plain = parse("id,lower,upper,size\na,0,2,10\n", 64).unwrap();
        let out = write_table(
            &plain.table,
            &plain.problem,
            &Placement { offsets: vec![0] },
        );
        assert_eq!(out, "id,lower,upper,size,alignment,offset\na,0,2,10,64,0\n");
    }

    #[test]
    fn a_leading_byte_order_mark_is_ignored() {
        let plain = parse("id,lower,upper,size\na,0,2,10\n", 1).unwrap();
        let marked = parse("\u{feff}id,lower,upper,size\na,0,2,10\n", 1).unwrap();
        assert_eq!(marked.ids, plain.ids);
        assert_eq!(marked.problem, plain.problem);
    }

    #[test]
    fn parses_columns_in_any_order_and_round_trips() {
        let csv = parse("size,id,upper,lower\n10,a,3,0\n20,b,5,2\n", 1).unwrap();
        assert_eq!(csv.ids, vec!["a", "b"]);
        assert_eq!(csv.problem.buffers[1].lifetime, Lifetime::new(2, 5));
        let text = write(
            &csv.ids,
            &csv.problem,
            &Placement {
                offsets: vec![0, 10],
            },
        );
        let back = parse(&text, 1).unwrap();
        assert_eq!(back.problem, csv.problem);
        assert_eq!(
            back.offsets,
            Some(Placement {
                offsets: vec![0, 10]
            })
        );
    }

    #[test]
    fn buffers_that_need_more_than_a_64_bit_arena_are_refused_naming_the_line_and_buffer() {
        let big = u64::MAX / 3 + 1;
        let text = format!("id,lower,upper,size\na,0,2,{big}\nb,1,3,{big}\nc,1,4,{big}\n");
        let err = parse(&text, 1).unwrap_err().to_string();
        assert!(
            err.starts_with("line 4 (buffer `c`): with it the buffers alive at step 1 need "),
            "{err}"
        );
        assert!(err.contains("no placement exists"), "{err}");
        let rows = [("a", 0, 2), ("b", 1, 3), ("c", 1, 4)]
            .map(|(id, lo, hi)| (id.to_string(), lo, hi, big, None));
        let err = from_rows(rows, 1).unwrap_err();
        assert!(err.starts_with("buffers[2] (buffer `c`): with it"), "{err}");
        // Two of them live together at most: they fit.
        let text = format!("id,lower,upper,size\na,0,2,{big}\nb,1,3,{big}\nc,2,4,{big}\n");
        assert!(parse(&text, 1).is_ok());
    }

    #[test]
    fn ids_with_commas_quotes_or_spaces_are_written_quoted_and_read_back_unchanged() {
        let ids: Vec<String> = ["a,b", "say \"hi\"", " pad ", "plain", "", "\""]
            .map(String::from)
            .to_vec();
        let rows = ids
            .iter()
            .enumerate()
            .map(|(i, id)| (id.clone(), i as u64, i as u64 + 2, 8 * (i as u64 + 1), None));
        let (ids2, problem) = from_rows(rows, 1).unwrap();
        let placement = Placement {
            offsets: (0..ids.len() as u64).map(|i| 64 * i).collect(),
        };
        let text = write(&ids2, &problem, &placement);
        assert!(text.contains("\n\"a,b\",0,2,8,0\n"), "{text}");
        assert!(text.contains("\n\"say \"\"hi\"\"\",1,3,16,64\n"), "{text}");
        let back = parse(&text, 1).unwrap();
        assert_eq!(back.ids, ids);
        assert_eq!(back.problem, problem);
        assert_eq!(back.offsets, Some(placement));
        // A quote left open, or text after a closing quote, names the line.
        for bad in [
            "id,lower,upper,size\n\"a,0,2,8\n",
            "id,lower,upper,size\n\"a\"b,0,2,8\n",
        ] {
            assert_eq!(parse(bad, 1), Err(CsvError::Quote { line: 2 }), "{bad}");
        }
        // A line break cannot be written as a row: refused on input.
        let e = from_rows([("a\nb".to_string(), 0, 2, 8, None)], 1).unwrap_err();
        assert!(e.contains("line break"), "{e}");
    }

    #[test]
    fn reports_the_line_and_column_of_a_bad_number() {
        let err = parse("id,lower,upper,size\n0,0,1,8\n1,0,x,8\n", 1).unwrap_err();
        assert_eq!(
            err.to_string(),
            "line 3, column `upper`: `x` is not a non-negative integer"
        );
    }

    #[test]
    fn rejects_empty_lifetimes_zero_sizes_and_duplicate_ids() {
        assert!(parse("id,lower,upper,size\n7,3,3,8\n", 1)
            .unwrap_err()
            .to_string()
            .contains("buffer `7`"));
        assert!(parse("id,lower,upper,size\n7,0,3,0\n", 1)
            .unwrap_err()
            .to_string()
            .contains("size"));
        assert!(parse("id,lower,upper,size\n7,0,3,1\n7,0,3,1\n", 1)
            .unwrap_err()
            .to_string()
            .contains("line 2"));
        assert_eq!(
            parse("id,lower,size\n", 1).unwrap_err(),
            CsvError::MissingColumn {
                column: "upper",
                read: "`id`, `lower`, `size`".into()
            }
        );
    }

    #[test]
    fn minimallocs_newer_header_is_named_with_the_renaming_to_do() {
        let e = parse("buffer,start,end,size\n0,0,3,8\n", 1).unwrap_err();
        assert_eq!(e, CsvError::NewerHeader("buffer,start,end,size".into()));
        let text = e.to_string();
        assert!(
            text.contains("id,lower,upper,size") && text.contains("inclusive"),
            "{text}"
        );
    }

    #[test]
    fn an_offset_column_is_written_back_where_it_stood_and_may_be_left_empty_as_a_template() {
        let text = "id,offset,lower,upper,size,x\na,,0,2,10,p\nb,,1,3,20,q\n";
        let parsed = parse(text, 1).unwrap();
        assert_eq!(parsed.offsets, None);
        assert_eq!(parsed.lines, vec![2, 3]);
        let placement = Placement {
            offsets: vec![0, 10],
        };
        assert_eq!(
            write_table(&parsed.table, &parsed.problem, &placement),
            "id,offset,lower,upper,size,x\na,0,0,2,10,p\nb,10,1,3,20,q\n"
        );
        // An added alignment column (`--alignment`) goes before the offsets, where they stood.
        let aligned = parse(text, 8).unwrap();
        assert_eq!(
            write_table(&aligned.table, &aligned.problem, &placement),
            "id,alignment,offset,lower,upper,size,x\na,8,0,0,2,10,p\nb,8,10,1,3,20,q\n"
        );
        // Given on every row, the offsets are read; on some rows only, the first empty one is
        // named.
        let given = parse("id,offset,lower,upper,size\na,5,0,2,10\n", 1).unwrap();
        assert_eq!(given.offsets.unwrap().offsets, vec![5]);
        let e = parse("id,offset,lower,upper,size\na,5,0,2,10\nb,,1,3,20\n", 1).unwrap_err();
        assert!(
            matches!(&e, CsvError::Rule { line: 3, id, .. } if id == "b"),
            "{e}"
        );
        assert!(e.to_string().contains("offset is empty"), "{e}");
    }

    #[test]
    fn columns_of_ones_own_keep_their_text_as_written_spaces_included() {
        let text = "id, lower, upper, size, note\na,0,1,4, padded \nb,0,1,4,\"quoted \"\n";
        let parsed = parse(text, 1).unwrap();
        assert_eq!(parsed.table.rows[0][4], " padded ");
        assert_eq!(parsed.table.rows[1][4], "quoted ");
        let out = write_table(
            &parsed.table,
            &parsed.problem,
            &Placement {
                offsets: vec![0, 4],
            },
        );
        assert_eq!(
            out,
            "id,lower,upper,size,note,offset\na,0,1,4,\" padded \",0\nb,0,1,4,\"quoted \",4\n"
        );
        // Read back, the texts are the same.
        let again = parse(&out, 1).unwrap();
        assert_eq!(again.table.rows, parsed.table.rows);
    }

    #[test]
    fn a_first_line_of_numbers_is_named_as_a_missing_header() {
        let e = parse("0,0,1,4\n1,0,2,8\n", 1).unwrap_err();
        assert_eq!(
            e,
            CsvError::NoHeader {
                line: 1,
                text: "0,0,1,4".into()
            }
        );
        assert!(e.to_string().contains("is not a header"), "{e}");
    }

    #[test]
    fn control_characters_in_a_message_are_escaped() {
        let e = parse("id,lower,upper,size\na,0,1,4\u{0}\n", 1).unwrap_err();
        assert!(e.to_string().contains("`4\\u{0}`"), "{e}");
        let e = parse("id,lower,upper,size\n\u{7}a,0,0,4\n", 1).unwrap_err();
        assert!(e.to_string().contains("buffer `\\u{7}a`"), "{e}");
    }

    #[test]
    fn a_quoted_header_name_is_unquoted_as_a_field_is_and_round_trips() {
        let text = "\"id\",\"lower\",upper,size,\"tag\",\"my,note\"\na,0,10,4,x,y\n";
        let parsed = parse(text, 1).unwrap();
        assert_eq!(
            parsed.table.header,
            vec!["id", "lower", "upper", "size", "tag", "my,note"]
        );
        let out = write_table(
            &parsed.table,
            &parsed.problem,
            &Placement { offsets: vec![0] },
        );
        assert_eq!(
            out,
            "id,lower,upper,size,tag,\"my,note\",offset\na,0,10,4,x,y,0\n"
        );
        assert_eq!(parse(&out, 1).unwrap().table.header, parsed.table.header);
        // A quoted `offset` is the offset column.
        let p = parse("id,\"offset\",lower,upper,size\na,,0,1,4\n", 1).unwrap();
        assert_eq!(p.table.offset_at, Some(1));
        // A header name with a control character is shown escaped.
        let e = parse("id,lo\u{7}wer,upper,size\n", 1).unwrap_err();
        assert!(e.to_string().contains("`lo\\u{7}wer`"), "{e}");
    }
}
