//! Confinement to a workspace, by capability: the workspace directory is opened as a
//! `cap_std::fs::Dir` and every path is resolved beneath it by the kernel, component by
//! component, so no `..`, absolute path or symlink (even one swapped in while the call runs)
//! can lead out (a symlink must be relative and stay inside). Only regular files are read or written (a FIFO or device is refused without
//! blocking), and files with more than one hard link are refused, since another link may
//! lead outside.

use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Component, Path, PathBuf};

use cap_std::ambient_authority;
use cap_std::fs::{Dir, MetadataExt, OpenOptions, OpenOptionsExt};

/// Why a path was refused; the text goes back to the model.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refused(pub String);

/// A workspace directory, opened for the length of one tool call.
pub struct Workspace {
    dir: Dir,
}

/// What a read found: the start of the file (at most the cap) and its real size.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileStart {
    pub bytes: Vec<u8>,
    pub size: u64,
}

impl Workspace {
    /// Open (creating it when missing) the workspace at `root`.
    pub fn open(root: &Path) -> Result<Workspace, Refused> {
        std::fs::create_dir_all(root)
            .and_then(|()| Dir::open_ambient_dir(root, ambient_authority()))
            .map(|dir| Workspace { dir })
            .map_err(|e| Refused(format!("the workspace is unavailable: {e}")))
    }

    /// Read at most `cap` bytes of the regular file at `relative`.
    pub fn read(&self, relative: &str, offset: u64, max: usize) -> Result<FileStart, Refused> {
        let path = clean(relative)?;
        let mut options = OpenOptions::new();
        options.read(true).custom_flags(libc::O_NONBLOCK);
        let mut file = self
            .dir
            .open_with(&path, &options)
            .map_err(|e| refusal(relative, &e))?;
        let meta = file
            .metadata()
            .map_err(|e| Refused(format!("cannot read {relative}: {e}")))?;
        check_regular(relative, meta.is_file(), meta.nlink())?;
        let from = offset.min(meta.len());
        file.seek(SeekFrom::Start(from))
            .map_err(|e| Refused(format!("cannot read {relative}: {e}")))?;
        let wanted = (meta.len() - from).min(max as u64);
        let mut bytes = Vec::with_capacity(wanted as usize);
        file.take(wanted)
            .read_to_end(&mut bytes)
            .map_err(|e| Refused(format!("cannot read {relative}: {e}")))?;
        Ok(FileStart {
            bytes,
            size: meta.len(),
        })
    }

    /// Create or replace the regular file at `relative` (parents created as needed).
    pub fn write(&self, relative: &str, content: &[u8]) -> Result<(), Refused> {
        let path = clean(relative)?;
        if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
            self.dir
                .create_dir_all(parent)
                .map_err(|e| refusal(relative, &e))?;
        }
        // Opened without truncating, so what it is can be checked before it changes.
        let mut options = OpenOptions::new();
        options
            .write(true)
            .create(true)
            .custom_flags(libc::O_NONBLOCK);
        let mut file = self
            .dir
            .open_with(&path, &options)
            .map_err(|e| refusal(relative, &e))?;
        let meta = file
            .metadata()
            .map_err(|e| Refused(format!("cannot write {relative}: {e}")))?;
        check_regular(relative, meta.is_file(), meta.nlink())?;
        file.set_len(0)
            .and_then(|()| file.write_all(content))
            .map_err(|e| Refused(format!("cannot write {relative}: {e}")))
    }
}

fn check_regular(relative: &str, is_file: bool, links: u64) -> Result<(), Refused> {
    if !is_file {
        return Err(Refused(format!("{relative} is not a regular file")));
    }
    if links > 1 {
        return Err(Refused(format!(
            "{relative} has other hard links, which may lead outside the workspace"
        )));
    }
    Ok(())
}

/// What the model hears when the kernel refuses a path.
fn refusal(relative: &str, e: &std::io::Error) -> Refused {
    match e.kind() {
        std::io::ErrorKind::NotFound => Refused(format!("{relative} does not exist")),
        std::io::ErrorKind::PermissionDenied => {
            Refused(format!("{relative} resolves outside the workspace"))
        }
        _ if e.raw_os_error() == Some(libc::ENXIO) => {
            Refused(format!("{relative} is not a regular file"))
        }
        _ => Refused(format!("{relative} is not accessible: {e}")),
    }
}

/// A relative path with no `..` and nothing absolute; refused early with a clear message
/// (the capability would refuse an escape anyway).
fn clean(relative: &str) -> Result<PathBuf, Refused> {
    if relative.trim().is_empty() {
        return Err(Refused("a path is required".into()));
    }
    let mut clean = PathBuf::new();
    for component in Path::new(relative).components() {
        match component {
            Component::Normal(part) => clean.push(part),
            Component::CurDir => {}
            Component::ParentDir => {
                return Err(Refused(format!(
                    "`..` is not allowed in paths ({relative})"
                )))
            }
            Component::RootDir | Component::Prefix(_) => {
                return Err(Refused(format!(
                "absolute paths are not allowed ({relative}); use a path relative to the workspace"
            )))
            }
        }
    }
    if clean.as_os_str().is_empty() {
        return Err(Refused(
            "the path names the workspace itself, not a file".into(),
        ));
    }
    Ok(clean)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ws() -> (tempfile::TempDir, Workspace) {
        let dir = tempfile::tempdir().unwrap();
        let ws = Workspace::open(dir.path()).unwrap();
        (dir, ws)
    }

    #[test]
    fn refuses_parent_dirs_and_absolute_paths() {
        let (_d, ws) = ws();
        for (path, says) in [
            ("../x", ".."),
            ("a/../../x", ".."),
            ("/etc/passwd", "absolute"),
            ("", "required"),
            (".", "workspace itself"),
        ] {
            let e = ws.read(path, 0, 10).unwrap_err().0;
            assert!(e.contains(says), "{path}: {e}");
        }
    }

    #[test]
    fn writes_nested_new_files_and_reads_them_back() {
        let (dir, ws) = ws();
        ws.write("notes/today/a.md", b"hello").unwrap();
        assert_eq!(
            std::fs::read(dir.path().join("notes/today/a.md")).unwrap(),
            b"hello"
        );
        ws.write("notes/today/a.md", b"hi").unwrap();
        let read = ws.read("notes/today/a.md", 0, 100).unwrap();
        assert_eq!((read.bytes, read.size), (b"hi".to_vec(), 2));
    }

    #[test]
    fn reads_stop_at_the_cap_and_report_the_size() {
        let (dir, ws) = ws();
        std::fs::write(dir.path().join("big"), vec![b'x'; 10_000]).unwrap();
        let read = ws.read("big", 0, 100).unwrap();
        assert_eq!((read.bytes.len(), read.size), (100, 10_000));
        let tail = ws.read("big", 9_950, 100).unwrap();
        assert_eq!((tail.bytes.len(), tail.size), (50, 10_000));
    }

    #[test]
    fn links_that_lead_out_are_refused() {
        let (dir, ws) = ws();
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("secret"), "s").unwrap();
        std::os::unix::fs::symlink(outside.path().join("secret"), dir.path().join("file_link"))
            .unwrap();
        std::os::unix::fs::symlink(outside.path(), dir.path().join("dir_link")).unwrap();
        assert!(ws.read("file_link", 0, 10).is_err());
        assert!(ws.read("dir_link/secret", 0, 10).is_err());
        assert!(ws.write("dir_link/new.txt", b"x").is_err());
        assert!(!outside.path().join("new.txt").exists());
        // A relative link that stays inside is fine; an absolute one is refused even when it
        // points inside (the capability has no notion of the host's root).
        std::fs::write(dir.path().join("real"), "r").unwrap();
        std::os::unix::fs::symlink("real", dir.path().join("inner_link")).unwrap();
        assert_eq!(ws.read("inner_link", 0, 10).unwrap().bytes, b"r");
        std::os::unix::fs::symlink(dir.path().join("real"), dir.path().join("absolute_link"))
            .unwrap();
        assert!(ws.read("absolute_link", 0, 10).is_err());
    }

    #[test]
    fn hard_links_fifos_and_directories_are_refused() {
        let (dir, ws) = ws();
        let outside = tempfile::tempdir().unwrap();
        let target = outside.path().join("passwd");
        std::fs::write(&target, "root:x").unwrap();
        // Same filesystem (both under the temp dir): a hard link to an outside inode.
        if std::fs::hard_link(&target, dir.path().join("linked")).is_ok() {
            assert!(ws
                .read("linked", 0, 10)
                .unwrap_err()
                .0
                .contains("hard links"));
            assert!(ws
                .write("linked", b"pwned")
                .unwrap_err()
                .0
                .contains("hard links"));
            assert_eq!(std::fs::read_to_string(&target).unwrap(), "root:x");
        }
        let fifo = std::ffi::CString::new(dir.path().join("pipe").to_str().unwrap()).unwrap();
        // SAFETY: mkfifo reads a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o600) }, 0);
        // Neither blocks: a FIFO with no writer opens at once and is refused.
        assert!(ws
            .read("pipe", 0, 10)
            .unwrap_err()
            .0
            .contains("not a regular file"));
        assert!(ws
            .write("pipe", b"x")
            .unwrap_err()
            .0
            .contains("not a regular file"));
        std::fs::create_dir(dir.path().join("sub")).unwrap();
        assert!(ws.read("sub", 0, 10).is_err());
    }
}
