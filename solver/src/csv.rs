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
    /// Offsets when the file had an `offset` column.
    pub offsets: Option<Placement>,
    /// The file's columns as read, without its `offset` column ([`write_table`] writes them
    /// back with the offsets: the same CSV with an offset column).
    pub table: Table,
}

/// The columns of a buffer CSV as read: header names as written (trimmed) and each row's
/// fields (unquoted), in file order, without an `offset` column.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Table {
    /// Column names.
    pub header: Vec<String>,
    /// One row of fields per buffer, by index.
    pub rows: Vec<Vec<String>>,
}

/// An error in a buffer CSV.
#[derive(Debug, Clone, Error, PartialEq, Eq)]
pub enum CsvError {
    /// The file is empty.
    #[error("buffer CSV is empty: expected a header `id,lower,upper,size`")]
    Empty,
    /// A required column is missing from the header.
    #[error("header lacks column `{0}` (need id, lower, upper, size)")]
    MissingColumn(&'static str),
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
        .map(|(i, l)| (i + 1, l.trim()))
        .filter(|(_, l)| !l.is_empty());
    let (_, header) = lines.next().ok_or(CsvError::Empty)?;
    let cols: Vec<String> = header
        .split(',')
        .map(|c| c.trim().to_ascii_lowercase())
        .collect();
    for (i, c) in cols.iter().enumerate() {
        if cols[..i].contains(c) {
            return Err(CsvError::DuplicateColumn(c.clone()));
        }
    }
    let find = |name: &str| cols.iter().position(|c| c == name);
    let need = |name: &'static str| find(name).ok_or(CsvError::MissingColumn(name));
    if find("id").is_none() && (find("buffer").is_some() || find("buffer_id").is_some()) {
        return Err(CsvError::NewerHeader(header.to_string()));
    }
    let (c_id, c_lo, c_hi, c_size) = (need("id")?, need("lower")?, need("upper")?, need("size")?);
    let (c_align, c_off) = (find("alignment"), find("offset"));
    let kept = |fields: &[String]| -> Vec<String> {
        fields
            .iter()
            .enumerate()
            .filter(|&(c, _)| Some(c) != c_off)
            .map(|(_, f)| f.clone())
            .collect()
    };
    let mut table = Table {
        header: kept(
            &header
                .split(',')
                .map(|c| c.trim().to_string())
                .collect::<Vec<_>>(),
        ),
        rows: Vec::new(),
    };
    let mut ids = Vec::new();
    let mut buffers = Vec::new();
    let mut offsets = Vec::new();
    let mut lines_of = Vec::new();
    let mut seen = std::collections::BTreeMap::new();
    for (line, row) in lines {
        let fields = split_row(row).ok_or(CsvError::Quote { line })?;
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
                column: cols[c].clone(),
                value: fields[c].to_string(),
            })
        };
        let id = fields[c_id].to_string();
        let rule = |rule: String| CsvError::Rule {
            line,
            id: id.clone(),
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
            offsets.push(num(c)?);
        }
        table.rows.push(kept(&fields));
        ids.push(id);
        buffers.push(buffer);
        lines_of.push(line);
    }
    let problem = PlacementProblem::new(buffers);
    if let Some((step, i, bytes)) = problem.address_space_overflow() {
        return Err(CsvError::Rule {
            line: lines_of[i],
            id: ids[i].clone(),
            rule: too_large(step, bytes),
        });
    }
    Ok(BufferCsv {
        ids,
        problem,
        offsets: c_off.map(|_| Placement { offsets }),
        table,
    })
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
    let mut out = String::new();
    let header: Vec<String> = table.header.iter().map(|c| field(c).into_owned()).collect();
    out.push_str(&header.join(","));
    out.push_str(if add_align {
        ",alignment,offset\n"
    } else {
        ",offset\n"
    });
    for ((row, b), off) in table
        .rows
        .iter()
        .zip(&problem.buffers)
        .zip(&placement.offsets)
    {
        let fields: Vec<String> = row.iter().map(|f| field(f).into_owned()).collect();
        out.push_str(&fields.join(","));
        if add_align {
            let _ = write!(out, ",{}", b.alignment);
        }
        let _ = writeln!(out, ",{off}");
    }
    out
}

/// Writes `id,lower,upper,size[,alignment]` rows: the buffers without offsets, a problem to
/// solve (alignment only when some buffer needs more than 1).
pub fn write_buffers(ids: &[String], problem: &PlacementProblem) -> String {
    rows(ids, problem, None)
}

/// The fields of one CSV row: unquoted ones trimmed, quoted ones (RFC 4180) as written with
/// `""` read as `"`; `None` when a quote is not closed or text follows a closing quote.
fn split_row(row: &str) -> Option<Vec<String>> {
    let mut fields = Vec::new();
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
            fields.push(field);
            let after = after.trim_start();
            match after.strip_prefix(',') {
                Some(r) => rest = r,
                None if after.is_empty() => return Some(fields),
                None => return None,
            }
        } else {
            match t.split_once(',') {
                Some((f, r)) => {
                    fields.push(f.trim().to_string());
                    rest = r;
                }
                None => {
                    fields.push(t.trim().to_string());
                    return Some(fields);
                }
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
            CsvError::MissingColumn("upper")
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
}
