//! Reading the text documents the front ends take as files (graphs, plans, device profiles,
//! CSVs): at most [`MAX_TEXT_BYTES`], UTF-8, less a leading byte order mark (which editors on
//! Windows write and JSON and CSV readers may ignore).
//!
//! The cap keeps a mistaken path (a multi-gigabyte dump, `/dev/zero`, a FIFO that never ends)
//! from growing memory without bound: the read stops one byte past the cap and says so.
//!
//! Cost: one pass over at most `MAX_TEXT_BYTES + 1` bytes.

use std::io::Read;
use std::path::{Path, PathBuf};
use thiserror::Error;

/// The largest text document read from a file (bytes): 1 GiB, some thousand times the largest
/// graph of the zoo.
pub const MAX_TEXT_BYTES: u64 = 1 << 30;

/// Why a text file could not be read.
#[derive(Debug, Error)]
pub enum TextFileError {
    /// The file could not be opened or read.
    #[error("cannot read {}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// What the system said.
        source: std::io::Error,
    },
    /// The file is longer than `limit` bytes.
    #[error("cannot read {}: longer than {limit} bytes (the most memplan reads as one document)", path.display())]
    TooLarge {
        /// The file.
        path: PathBuf,
        /// The cap ([`MAX_TEXT_BYTES`]).
        limit: u64,
    },
    /// The file is not UTF-8 text.
    #[error("cannot read {}: not UTF-8 text (byte {offset} starts an invalid sequence)", path.display())]
    NotUtf8 {
        /// The file.
        path: PathBuf,
        /// Offset of the first byte that is not UTF-8 (bytes).
        offset: usize,
    },
}

/// The text of the file at `path` (see the module doc).
pub fn read(path: &Path) -> Result<String, TextFileError> {
    read_capped(path, MAX_TEXT_BYTES)
}

/// [`read`] with the cap `limit` (bytes).
fn read_capped(path: &Path, limit: u64) -> Result<String, TextFileError> {
    let io = |source| TextFileError::Io {
        path: path.to_path_buf(),
        source,
    };
    let file = std::fs::File::open(path).map_err(io)?;
    let mut bytes = Vec::new();
    file.take(limit.saturating_add(1))
        .read_to_end(&mut bytes)
        .map_err(io)?;
    if bytes.len() as u64 > limit {
        return Err(TextFileError::TooLarge {
            path: path.to_path_buf(),
            limit,
        });
    }
    let text = String::from_utf8(bytes).map_err(|e| TextFileError::NotUtf8 {
        path: path.to_path_buf(),
        offset: e.utf8_error().valid_up_to(),
    })?;
    Ok(match text.strip_prefix('\u{feff}') {
        Some(rest) => rest.to_string(),
        None => text,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_is_read_without_its_byte_order_mark() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("g.json");
        std::fs::write(&path, "\u{feff}{\"a\": 1}").unwrap();
        assert_eq!(read(&path).unwrap(), "{\"a\": 1}");
    }

    #[test]
    fn an_endless_or_oversized_file_is_refused_at_the_cap_naming_the_path() {
        let e = read_capped(Path::new("/dev/zero"), 4096).unwrap_err();
        assert!(matches!(e, TextFileError::TooLarge { limit: 4096, .. }));
        assert!(e.to_string().contains("/dev/zero"), "{e}");
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("big.json");
        std::fs::write(&path, "x".repeat(4097)).unwrap();
        assert!(read_capped(&path, 4097).is_ok());
        assert!(matches!(
            read_capped(&path, 4096),
            Err(TextFileError::TooLarge { .. })
        ));
    }

    #[test]
    fn a_missing_or_binary_file_says_why_naming_the_path() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("missing.json");
        let e = read(&missing).unwrap_err().to_string();
        assert!(
            e.starts_with("cannot read ") && e.contains("missing.json"),
            "{e}"
        );
        let binary = dir.path().join("b.json");
        std::fs::write(&binary, [b'{', 0xff, b'}']).unwrap();
        let e = read(&binary).unwrap_err().to_string();
        assert!(e.contains("not UTF-8") && e.contains("byte 1"), "{e}");
    }
}
