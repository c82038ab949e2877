//! Writing a command's output files safely.
//!
//! [`check_outputs`] runs before a command does any work: no output may be one of the
//! command's inputs or another of its outputs, and every output's folder must exist. Then
//! [`write_files`] writes all the outputs of a command together: each regular file through a
//! temporary file beside it (`NAME.tmp~`) and a rename, so a failure never leaves half a
//! file; every temporary file is written before the first rename, so a failure to write one
//! output leaves the others as they were, and a rename that fails puts back the outputs
//! already renamed (from their old contents, kept beside them as `NAME.old~N` while the
//! renames run; special files are written last and cannot be put back). A symbolic link is followed: its target is replaced
//! the same way and the link stays. A special file (a device such as `/dev/null`, a FIFO, a
//! socket) is written directly, never replaced.
//!
//! Errors whose cause is the user's path (a missing folder, a directory, no permission) are
//! bad input (exit code 2) naming the path.

use crate::common::bad;
use anyhow::Result;
use std::fs::{self, Metadata};
use std::io::{ErrorKind, Write};
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};

/// The most symbolic links followed from an output path to the file it names (as Linux's
/// `MAXSYMLINKS`).
const MAX_LINKS: usize = 40;

/// The path `path` names after following symbolic links (none when it is not a link; a
/// dangling link gives the path its last link points to, where the file will be created).
fn resolve_links(path: &Path) -> Result<PathBuf> {
    let mut p = path.to_path_buf();
    for _ in 0..MAX_LINKS {
        match fs::symlink_metadata(&p) {
            Ok(m) if m.file_type().is_symlink() => {
                let target = fs::read_link(&p)
                    .map_err(|e| bad(format!("cannot read the link {}: {e}", p.display())))?;
                p = match p.parent() {
                    Some(dir) if target.is_relative() => dir.join(target),
                    _ => target,
                };
            }
            _ => return Ok(p),
        }
    }
    Err(bad(format!(
        "{}: more than {MAX_LINKS} levels of symbolic links",
        path.display()
    )))
}

/// Whether `m` is a special file: a character or block device, a FIFO or a socket.
fn is_special(m: &Metadata) -> bool {
    let t = m.file_type();
    t.is_char_device() || t.is_block_device() || t.is_fifo() || t.is_socket()
}

/// The folder a file at `path` lives in (`.` for a bare file name).
fn parent_dir(path: &Path) -> &Path {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    }
}

/// What identifies a file: its device and inode when it exists, else the canonical path of
/// its folder joined with its name (where it will be created).
#[derive(PartialEq, Eq)]
enum FileKey {
    /// An existing file.
    Inode(u64, u64),
    /// A file not created yet.
    Planned(PathBuf),
}

/// The [`FileKey`] of `path`; `None` for a special file (which never conflicts: `/dev/null`
/// may take several outputs) or a path whose folder cannot be resolved.
fn file_key(path: &Path) -> Option<FileKey> {
    match fs::metadata(path) {
        Ok(m) if is_special(&m) => None,
        Ok(m) => Some(FileKey::Inode(m.dev(), m.ino())),
        Err(_) => {
            let target = resolve_links(path).ok()?;
            let dir = fs::canonicalize(parent_dir(&target)).ok()?;
            Some(FileKey::Planned(dir.join(target.file_name()?)))
        }
    }
}

/// Checks, before any work, that `path` (given with `flag`) can be an output folder: an
/// existing folder, or a missing one whose nearest existing ancestor is a folder. Nothing is
/// created here: the command creates the folder when it writes, so a failing run leaves none.
pub fn check_folder(flag: &str, path: &Path) -> Result<()> {
    if path.exists() {
        if path.is_dir() {
            return Ok(());
        }
        return Err(bad(format!(
            "{flag} {}: exists and is not a folder",
            path.display()
        )));
    }
    let ancestor = path
        .ancestors()
        .skip(1)
        .find(|a| a.as_os_str().is_empty() || a.exists());
    match ancestor {
        Some(a) if !a.as_os_str().is_empty() && !a.is_dir() => Err(bad(format!(
            "{flag} {}: {} is not a folder",
            path.display(),
            a.display()
        ))),
        _ => Ok(()),
    }
}

/// Whether `a` and `b` name the same file or folder ([`FileKey`]); never for special files.
pub fn same_file(a: &Path, b: &Path) -> bool {
    match (file_key(a), file_key(b)) {
        (Some(x), Some(y)) => x == y,
        _ => false,
    }
}

/// Checks, before a command does any work, that its outputs can be written: no output is
/// one of `inputs` or another output (the same file by device and inode, or by canonical
/// folder and name when it does not exist yet), none is a directory, and every output's
/// folder exists. `inputs` and `outputs` are (role, path) pairs; roles name the file in
/// messages, e.g. `("the input graph", graph)` and `("-o", output)`. Special files (such as
/// `/dev/null`) are exempt from the comparisons. Every failure is bad input (exit code 2).
pub fn check_outputs(inputs: &[(&str, &Path)], outputs: &[(&str, &Path)]) -> Result<()> {
    let input_keys: Vec<_> = inputs
        .iter()
        .map(|(role, p)| (*role, file_key(p)))
        .collect();
    let mut seen: Vec<(&str, &Path, FileKey)> = Vec::new();
    for &(flag, path) in outputs {
        let shown = path.display();
        let target = resolve_links(path)?;
        match fs::metadata(&target) {
            Ok(m) if m.is_dir() => return Err(bad(format!("{flag} {shown} is a directory"))),
            Ok(m) if is_special(&m) => continue,
            _ => {}
        }
        let dir = parent_dir(&target);
        match fs::metadata(dir) {
            Ok(m) if m.is_dir() => {}
            Ok(_) => {
                return Err(bad(format!(
                    "{flag} {shown}: {} is not a directory",
                    dir.display()
                )))
            }
            Err(e) => {
                return Err(bad(format!(
                    "{flag} {shown}: the directory {} {}",
                    dir.display(),
                    if e.kind() == ErrorKind::NotFound {
                        "does not exist".to_string()
                    } else {
                        format!("cannot be read: {e}")
                    }
                )))
            }
        }
        let Some(key) = file_key(path) else {
            continue;
        };
        if let Some((role, _)) = input_keys.iter().find(|(_, k)| k.as_ref() == Some(&key)) {
            return Err(bad(format!(
                "{flag} {shown} is also {role}; choose another path"
            )));
        }
        if let Some((other, other_path, _)) = seen.iter().find(|(_, _, k)| *k == key) {
            return Err(bad(format!(
                "{flag} {shown} is the same file as {other} {}; choose another path",
                other_path.display()
            )));
        }
        seen.push((flag, path, key));
    }
    Ok(())
}

/// An I/O error on `path` (while `doing` something): bad input naming the path when the
/// user's path is the cause (a missing folder, a directory, no permission, a read-only file
/// system), else an internal error.
fn io_error(doing: &str, path: &Path, e: std::io::Error) -> anyhow::Error {
    let users_path = matches!(
        e.kind(),
        ErrorKind::NotFound
            | ErrorKind::PermissionDenied
            | ErrorKind::IsADirectory
            | ErrorKind::NotADirectory
            | ErrorKind::ReadOnlyFilesystem
            | ErrorKind::DirectoryNotEmpty
    );
    let msg = match e.kind() {
        ErrorKind::IsADirectory | ErrorKind::DirectoryNotEmpty => {
            format!("cannot write {}: it is a directory", path.display())
        }
        _ => format!("cannot {doing} {}: {e}", path.display()),
    };
    if users_path {
        bad(msg)
    } else {
        anyhow::anyhow!(msg)
    }
}

/// How one output is written: a temporary file renamed onto its target, or a special file
/// written in place.
enum Staged<'a> {
    /// A regular file (new or replaced): `tmp` is written, then renamed onto `target`.
    Replace {
        /// The temporary file beside the target.
        tmp: PathBuf,
        /// The file replaced (the output path, or the file its links point to).
        target: PathBuf,
        /// The path as given, for messages.
        given: &'a Path,
    },
    /// A special file, written directly when the others are in place.
    Direct {
        /// The special file.
        target: PathBuf,
        /// The bytes to write.
        data: &'a [u8],
    },
}

/// The temporary file beside `target`: `NAME.tmp~`.
fn tmp_path(target: &Path) -> PathBuf {
    let mut name = target.file_name().unwrap_or_default().to_os_string();
    name.push(".tmp~");
    target.with_file_name(name)
}

/// Removes the temporary files of `staged` (after a failure).
fn remove_temps(staged: &[Staged<'_>]) {
    for s in staged {
        if let Staged::Replace { tmp, .. } = s {
            // Best effort: the error that got us here is the one reported.
            let _ = fs::remove_file(tmp);
        }
    }
}

/// Writes every `(path, bytes)` of one command (module doc): every regular file's temporary
/// file first, then the renames, then the special files; after a failure no temporary file
/// is left behind.
pub fn write_files(files: &[(&Path, &[u8])]) -> Result<()> {
    let mut staged: Vec<Staged<'_>> = Vec::new();
    for &(path, data) in files {
        match stage(path, data) {
            Ok(s) => staged.push(s),
            Err(e) => {
                remove_temps(&staged);
                return Err(e);
            }
        }
    }
    rename_all(&staged)?;
    for s in &staged {
        if let Staged::Direct { target, data } = s {
            let mut f = fs::OpenOptions::new()
                .write(true)
                .open(target)
                .map_err(|e| io_error("open", target, e))?;
            f.write_all(data)
                .and_then(|()| f.flush())
                .map_err(|e| io_error("write", target, e))?;
        }
    }
    Ok(())
}

/// Keeps the old contents of `target` under a name of its own beside it, `NAME.old~N` for
/// the first `N` no file has: a hard link (no copy), or a copy where the file system has no
/// hard links. No existing file is ever replaced or removed; `None` when no backup could be
/// made.
fn keep_old(target: &Path) -> Option<PathBuf> {
    let name = target.file_name().unwrap_or_default();
    for n in 0..64u32 {
        let mut backup_name = name.to_os_string();
        backup_name.push(format!(".old~{n}"));
        let backup = target.with_file_name(backup_name);
        match fs::hard_link(target, &backup) {
            Ok(()) => return Some(backup),
            Err(e) if e.kind() == ErrorKind::AlreadyExists => continue,
            Err(_) => {}
        }
        // No hard link here (vfat, some network file systems, protected links): a copy,
        // into a file created new.
        let copied = fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&backup)
            .and_then(|mut out| {
                let mut src = fs::File::open(target)?;
                std::io::copy(&mut src, &mut out).map(|_| ())
            });
        match copied {
            Ok(()) => return Some(backup),
            Err(e) if e.kind() == ErrorKind::AlreadyExists => continue,
            Err(_) => {
                let _ = fs::remove_file(&backup);
                return None;
            }
        }
    }
    None
}

/// Renames every staged temporary file onto its target, all or none: each existing target
/// but the last is first kept beside it ([`keep_old`]; nothing is renamed after the last, so
/// it never needs putting back), and when a rename fails, the targets already replaced get
/// their old contents back (a target that did not exist is removed), so that a command
/// writes all its outputs or leaves every one as it was. The backups go once every rename
/// has succeeded. A target whose old contents cannot be kept fails the command before any
/// rename (nothing changed).
fn rename_all(staged: &[Staged<'_>]) -> Result<()> {
    let last = staged
        .iter()
        .rposition(|s| matches!(s, Staged::Replace { .. }));
    let mut backups: Vec<Option<PathBuf>> = Vec::with_capacity(staged.len());
    for (i, s) in staged.iter().enumerate() {
        let backup = match s {
            Staged::Replace { target, given, .. } if Some(i) != last && target.is_file() => {
                match keep_old(target) {
                    Some(b) => Some(b),
                    None => {
                        remove_backups(&backups);
                        remove_temps(staged);
                        return Err(bad(format!(
                            "cannot write {}: its old contents cannot be kept beside it while \
                             the command's other outputs are written",
                            given.display()
                        )));
                    }
                }
            }
            _ => None,
        };
        backups.push(backup);
    }
    for (i, s) in staged.iter().enumerate() {
        if let Staged::Replace { tmp, target, given } = s {
            if let Err(e) = fs::rename(tmp, target) {
                let unrestored = restore(&staged[..i], &backups[..i]);
                remove_backups(&backups[i..]);
                remove_temps(&staged[i..]);
                let err = io_error("write", given, e);
                return Err(if unrestored.is_empty() {
                    err
                } else {
                    err.context(format!(
                        "and the outputs written before it could not all be put back: {}",
                        unrestored.join("; ")
                    ))
                });
            }
        }
    }
    remove_backups(&backups);
    Ok(())
}

/// Puts back the old contents of the targets of `staged` (renamed onto already), from their
/// `backups`; a target that had none did not exist and is removed. What could not be put
/// back, each with where its old contents are.
fn restore(staged: &[Staged<'_>], backups: &[Option<PathBuf>]) -> Vec<String> {
    let mut failed = Vec::new();
    for (s, backup) in staged.iter().zip(backups) {
        if let Staged::Replace { target, given, .. } = s {
            let undone = match backup {
                Some(b) => fs::rename(b, target),
                None => fs::remove_file(target),
            };
            if let Err(e) = undone {
                failed.push(match backup {
                    Some(b) => format!(
                        "{} holds the new contents, its old ones are in {} ({e})",
                        given.display(),
                        b.display()
                    ),
                    None => format!("{} was written ({e})", given.display()),
                });
            }
        }
    }
    failed
}

/// Removes the backups left in `backups` (best effort: they are ours, made by [`keep_old`]).
fn remove_backups(backups: &[Option<PathBuf>]) {
    for b in backups.iter().flatten() {
        let _ = fs::remove_file(b);
    }
}

/// Prepares the output `path`: a special file is left for a direct write; otherwise `data`
/// goes to the temporary file beside the file `path` names (following links), with that
/// file's permissions when it exists.
fn stage<'a>(path: &'a Path, data: &'a [u8]) -> Result<Staged<'a>> {
    let target = resolve_links(path)?;
    let existing = fs::metadata(&target).ok();
    if let Some(m) = &existing {
        if is_special(m) {
            return Ok(Staged::Direct { target, data });
        }
        if m.is_dir() {
            return Err(bad(format!(
                "cannot write {}: it is a directory",
                path.display()
            )));
        }
    }
    let tmp = tmp_path(&target);
    let written = fs::write(&tmp, data).and_then(|()| match &existing {
        Some(m) => fs::set_permissions(&tmp, m.permissions()),
        None => Ok(()),
    });
    if let Err(e) = written {
        let _ = fs::remove_file(&tmp);
        return Err(io_error("write", path, e));
    }
    Ok(Staged::Replace {
        tmp,
        target,
        given: path,
    })
}

/// The outputs a command was given, as `(flag, path)` pairs for [`check_outputs`]: those of
/// `flags` whose path is set.
pub fn given<'a>(flags: &[(&'a str, &'a Option<PathBuf>)]) -> Vec<(&'a str, &'a Path)> {
    flags
        .iter()
        .filter_map(|&(flag, p)| p.as_deref().map(|p| (flag, p)))
        .collect()
}

/// Writes a command's main `text` to `output` together with its `others` files (one
/// [`write_files`]: a failure to write one leaves the others as they were), or, without an
/// `output`, the others first and then the text to stdout.
pub fn write_with(output: &Option<PathBuf>, text: &str, others: &[(&Path, &[u8])]) -> Result<()> {
    let mut files: Vec<(&Path, &[u8])> = Vec::with_capacity(others.len() + 1);
    if let Some(path) = output {
        files.push((path, text.as_bytes()));
    }
    files.extend_from_slice(others);
    write_files(&files)?;
    if output.is_none() {
        write_out(&None, text)?;
    }
    Ok(())
}

/// Writes `text` to `output` (see [`write_files`]), or to stdout when there is none.
pub fn write_out(output: &Option<PathBuf>, text: &str) -> Result<()> {
    match output {
        Some(path) => write_files(&[(path, text.as_bytes())]),
        None => {
            let mut out = std::io::stdout().lock();
            out.write_all(text.as_bytes())?;
            out.flush()?;
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(name: &str) -> PathBuf {
        let dir =
            std::env::temp_dir().join(format!("memplan-output-{name}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        dir
    }

    /// The names of the files in `dir`, sorted.
    fn names_in(dir: &Path) -> Vec<String> {
        let mut names: Vec<String> = fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    }

    #[test]
    fn a_failing_rename_puts_back_the_outputs_already_replaced() {
        let dir = scratch("rollback");
        let plan = dir.join("plan.json");
        let fresh = dir.join("report.html");
        fs::write(&plan, "old plan").unwrap();
        // A file of the user's with the first backup name is left alone.
        let users = dir.join("plan.json.old~0");
        fs::write(&users, "mine").unwrap();
        // The third target turns into a folder after staging: its rename fails.
        let blocked = dir.join("stats.json");
        let staged = vec![
            stage(&plan, b"new plan").unwrap(),
            stage(&fresh, b"new report").unwrap(),
            stage(&blocked, b"new stats").unwrap(),
        ];
        fs::create_dir(&blocked).unwrap();
        fs::write(blocked.join("keep"), "x").unwrap();
        assert!(rename_all(&staged).is_err());
        assert_eq!(fs::read_to_string(&plan).unwrap(), "old plan");
        assert!(
            !fresh.exists(),
            "an output that did not exist is removed again"
        );
        assert!(blocked.join("keep").exists());
        assert_eq!(fs::read_to_string(&users).unwrap(), "mine");
        let left = names_in(&dir);
        assert_eq!(
            left,
            ["plan.json", "plan.json.old~0", "stats.json"],
            "no temporary file or backup of ours left"
        );
        let _ = fs::remove_dir_all(&dir);
    }

    #[test]
    fn renames_that_succeed_replace_every_output_and_leave_no_backup() {
        let dir = scratch("commit");
        let plan = dir.join("plan.json");
        fs::write(&plan, "old plan").unwrap();
        write_files(&[(&plan, b"new plan"), (&dir.join("report.html"), b"report")]).unwrap();
        assert_eq!(fs::read_to_string(&plan).unwrap(), "new plan");
        let left = names_in(&dir);
        assert_eq!(left, ["plan.json", "report.html"]);
        let _ = fs::remove_dir_all(&dir);
    }
}
