//! Confinement to the workspace root: relative paths only, no `..`, and nothing that
//! resolves (symlinks included) outside the root.

use std::path::{Component, Path, PathBuf};

/// Why a path was refused; the text goes back to the model.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refused(pub String);

/// Resolve `relative` inside `root`. With `create_parents`, missing directories on the way
/// are created (only below a checked ancestor, so no link can redirect them).
pub fn resolve(root: &Path, relative: &str, create_parents: bool) -> Result<PathBuf, Refused> {
    let rel = Path::new(relative);
    if relative.trim().is_empty() {
        return Err(Refused("a path is required".into()));
    }
    let mut clean = PathBuf::new();
    for component in rel.components() {
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
    let root = root
        .canonicalize()
        .map_err(|e| Refused(format!("the workspace root is unavailable: {e}")))?;
    let target = root.join(&clean);
    let outside = || Refused(format!("{relative} resolves outside the workspace"));

    if target.symlink_metadata().is_ok() {
        // It exists: follow every link and check where it really is.
        let real = target.canonicalize().map_err(|_| outside())?;
        return if real.starts_with(&root) {
            Ok(real)
        } else {
            Err(outside())
        };
    }
    // It does not exist yet: its nearest existing ancestor must be inside the root.
    let mut ancestor = target.parent();
    while let Some(dir) = ancestor {
        if dir.symlink_metadata().is_ok() {
            let real = dir.canonicalize().map_err(|_| outside())?;
            if !real.starts_with(&root) {
                return Err(outside());
            }
            let rest = target.strip_prefix(dir).map_err(|_| outside())?;
            let resolved = real.join(rest);
            if create_parents {
                if let Some(parent) = resolved.parent() {
                    std::fs::create_dir_all(parent)
                        .map_err(|e| Refused(format!("cannot create {relative}: {e}")))?;
                }
            }
            return Ok(resolved);
        }
        ancestor = dir.parent();
    }
    Err(outside())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refuses_parent_dirs_and_absolute_paths() {
        let dir = tempfile::tempdir().unwrap();
        assert!(resolve(dir.path(), "../x", false)
            .unwrap_err()
            .0
            .contains(".."));
        assert!(resolve(dir.path(), "a/../../x", false).is_err());
        assert!(resolve(dir.path(), "/etc/passwd", false)
            .unwrap_err()
            .0
            .contains("absolute"));
        assert!(resolve(dir.path(), "", false).is_err());
        assert!(resolve(dir.path(), ".", false).is_err());
    }

    #[test]
    fn accepts_nested_new_files_and_creates_parents() {
        let dir = tempfile::tempdir().unwrap();
        let p = resolve(dir.path(), "notes/today/a.md", true).unwrap();
        assert!(p.starts_with(dir.path().canonicalize().unwrap()));
        assert!(p.parent().unwrap().is_dir());
    }

    #[cfg(unix)]
    #[test]
    fn refuses_links_that_lead_out() {
        let dir = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("secret"), "s").unwrap();
        std::os::unix::fs::symlink(outside.path().join("secret"), dir.path().join("file_link"))
            .unwrap();
        std::os::unix::fs::symlink(outside.path(), dir.path().join("dir_link")).unwrap();
        assert!(resolve(dir.path(), "file_link", false)
            .unwrap_err()
            .0
            .contains("outside"));
        assert!(resolve(dir.path(), "dir_link/secret", false).is_err());
        assert!(resolve(dir.path(), "dir_link/new.txt", true).is_err());
        // A link that stays inside is fine.
        std::fs::write(dir.path().join("real"), "r").unwrap();
        std::os::unix::fs::symlink(dir.path().join("real"), dir.path().join("inner_link")).unwrap();
        assert!(resolve(dir.path(), "inner_link", false).is_ok());
    }
}
