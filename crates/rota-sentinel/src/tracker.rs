//! Per-watcher state: which directories are armed for which sentinel, and what each sentinel
//! looked like at the last stat().

use std::collections::{HashMap, HashSet};
use std::ffi::{OsString, c_int};
use std::fs;
use std::io;
use std::path::{Component, Path, PathBuf};
use std::time::SystemTime;

use inotify::EventMask;

use crate::hub::{HubEvent, Registration};
use crate::{Error, SentinelState};

/// Events that mean a watched directory itself went away or moved, so the watch no longer
/// stands for the path it was armed for.
const SELF_GONE: EventMask = EventMask::IGNORED
    .union(EventMask::DELETE_SELF)
    .union(EventMask::MOVE_SELF)
    .union(EventMask::UNMOUNT);

struct Sentinel {
    path: PathBuf,
    parent: PathBuf,
    name: OsString,
    /// The directory armed for this sentinel: its parent, or the nearest existing ancestor.
    watching: Option<PathBuf>,
}

/// What one batch of events asks for.
#[derive(Default)]
pub(crate) struct Batch {
    /// Re-arm every watch, then stat every sentinel.
    pub(crate) rescan: bool,
    /// Sentinels (by index) to stat.
    dirty: HashSet<usize>,
}

pub(crate) struct Tracker {
    registration: Registration,
    sentinels: Vec<Sentinel>,
    states: Vec<SentinelState>,
    /// Watch descriptor → the directories this watcher armed that resolved to it (several paths
    /// can name one inode, e.g. `/var/run` → `/run`).
    armed: HashMap<c_int, Vec<PathBuf>>,
}

/// Checks the paths and removes duplicates, keeping the given order.
pub(crate) fn validate(paths: Vec<PathBuf>) -> Result<Vec<PathBuf>, Error> {
    let mut unique: Vec<PathBuf> = Vec::with_capacity(paths.len());
    for path in paths {
        if !path.is_absolute() {
            return Err(Error::RelativePath { path });
        }
        if path.file_name().is_none() || path.components().any(|c| c == Component::ParentDir) {
            return Err(Error::NotAFilePath { path });
        }
        if let Some(parent) = path.parent() {
            check_ancestors(&path, parent)?;
        }
        if !unique.contains(&path) {
            unique.push(path);
        }
    }
    Ok(unique)
}

/// The nearest existing ancestor of a sentinel's parent (or the parent itself) must be a
/// directory: otherwise the sentinel can never appear.
fn check_ancestors(sentinel: &Path, parent: &Path) -> Result<(), Error> {
    for dir in parent.ancestors() {
        match fs::metadata(dir) {
            Ok(metadata) if metadata.is_dir() => return Ok(()),
            Ok(_) => {
                return Err(Error::NotADirectory {
                    sentinel: sentinel.to_owned(),
                    path: dir.to_owned(),
                });
            }
            Err(error) if is_absent(&error) => {}
            Err(source) => {
                return Err(Error::Inspect {
                    sentinel: sentinel.to_owned(),
                    path: dir.to_owned(),
                    source,
                });
            }
        }
    }
    Ok(())
}

fn is_absent(error: &io::Error) -> bool {
    matches!(
        error.kind(),
        io::ErrorKind::NotFound | io::ErrorKind::NotADirectory
    )
}

/// The sentinel's mtime if it exists, `None` if it does not.
fn stat(path: &Path) -> io::Result<Option<SystemTime>> {
    match fs::metadata(path) {
        Ok(metadata) => Ok(Some(metadata.modified().unwrap_or(SystemTime::UNIX_EPOCH))),
        Err(error) if is_absent(&error) => Ok(None),
        Err(error) => Err(error),
    }
}

impl Tracker {
    /// `paths` must have passed [`validate`]. Nothing is armed or stat'ed yet.
    pub(crate) fn new(registration: Registration, paths: Vec<PathBuf>) -> Tracker {
        let sentinels: Vec<Sentinel> = paths
            .into_iter()
            .filter_map(|path| {
                let parent = path.parent()?.to_owned();
                let name = path.file_name()?.to_owned();
                Some(Sentinel {
                    path,
                    parent,
                    name,
                    watching: None,
                })
            })
            .collect();
        let states = sentinels
            .iter()
            .map(|sentinel| SentinelState {
                path: sentinel.path.clone(),
                present: None,
            })
            .collect();
        Tracker {
            registration,
            sentinels,
            states,
            armed: HashMap::new(),
        }
    }

    pub(crate) fn states(&self) -> &[SentinelState] {
        &self.states
    }

    /// Arms, for every sentinel, its parent directory or else the nearest existing ancestor,
    /// and releases watches no longer needed. With `strict`, a directory that exists but cannot
    /// be watched is an error; otherwise it is logged and the next ancestor up is tried (the
    /// safety re-check tries again later).
    pub(crate) fn rearm(&mut self, strict: bool) -> Result<(), Error> {
        let mut by_dir: HashMap<PathBuf, c_int> = HashMap::new();
        for sentinel in &mut self.sentinels {
            sentinel.watching = None;
            for dir in sentinel.parent.ancestors() {
                if by_dir.contains_key(dir) {
                    sentinel.watching = Some(dir.to_owned());
                    break;
                }
                match self.registration.acquire(dir) {
                    Ok(wd) => {
                        by_dir.insert(dir.to_owned(), wd);
                        sentinel.watching = Some(dir.to_owned());
                        break;
                    }
                    Err(error) if is_absent(&error) => {}
                    Err(source) => {
                        let (sentinel, path) = (sentinel.path.clone(), dir.to_owned());
                        let error = if source.kind() == io::ErrorKind::StorageFull {
                            // ENOSPC: fs.inotify.max_user_watches is exhausted.
                            Error::WatchLimit { sentinel, path }
                        } else {
                            Error::Watch {
                                sentinel,
                                path,
                                source,
                            }
                        };
                        if strict {
                            return Err(error);
                        }
                        tracing::warn!(%error, "trying the parent directory instead");
                    }
                }
            }
        }
        let mut armed: HashMap<c_int, Vec<PathBuf>> = HashMap::new();
        for (dir, wd) in by_dir {
            armed.entry(wd).or_default().push(dir);
        }
        for wd in self.armed.keys() {
            if !armed.contains_key(wd) {
                self.registration.release(*wd);
            }
        }
        self.armed = armed;
        Ok(())
    }

    /// Folds one hub event into `batch`.
    pub(crate) fn note(&self, event: HubEvent, batch: &mut Batch) -> Result<(), Error> {
        let (wd, mask, name) = match event {
            HubEvent::Fs { wd, mask, name } => (wd, mask, name),
            HubEvent::Overflow => {
                batch.rescan = true;
                return Ok(());
            }
            HubEvent::ReaderFailed(reason) => {
                return Err(Error::EventReader {
                    reason: reason.to_string(),
                });
            }
        };
        if mask.intersects(SELF_GONE) {
            batch.rescan = true;
            return Ok(());
        }
        let (Some(name), Some(dirs)) = (name, self.armed.get(&wd)) else {
            return Ok(());
        };
        for dir in dirs {
            let entry = dir.join(&name);
            for (index, sentinel) in self.sentinels.iter().enumerate() {
                if sentinel.watching.as_deref() != Some(dir.as_path()) {
                    continue;
                }
                if sentinel.parent == *dir {
                    if sentinel.name == name {
                        batch.dirty.insert(index);
                    }
                } else if sentinel.parent.starts_with(&entry) {
                    // A directory on the way down to the sentinel's parent changed.
                    batch.rescan = true;
                }
            }
        }
        Ok(())
    }

    /// Carries out a batch. Returns whether any sentinel changed.
    pub(crate) fn apply(&mut self, batch: Batch) -> bool {
        if batch.rescan {
            return self.rescan();
        }
        let mut changed = false;
        for index in batch.dirty {
            changed |= self.refresh(index);
        }
        changed
    }

    /// Re-arms every watch and stats every sentinel: after a queue overflow, a lost watch, or
    /// on the safety re-check. Returns whether any sentinel changed.
    pub(crate) fn rescan(&mut self) -> bool {
        if let Err(error) = self.rearm(false) {
            tracing::warn!(%error, "re-arming sentinel watches failed");
        }
        self.refresh_all()
    }

    pub(crate) fn refresh_all(&mut self) -> bool {
        let mut changed = false;
        for index in 0..self.sentinels.len() {
            changed |= self.refresh(index);
        }
        changed
    }

    /// Stats one sentinel. An error other than absence keeps the last known state.
    fn refresh(&mut self, index: usize) -> bool {
        let (Some(sentinel), Some(state)) = (self.sentinels.get(index), self.states.get_mut(index))
        else {
            return false;
        };
        match stat(&sentinel.path) {
            Ok(present) => {
                let changed = state.present != present;
                state.present = present;
                changed
            }
            Err(error) => {
                tracing::warn!(path = %sentinel.path.display(), %error, "cannot stat sentinel; keeping its last known state");
                false
            }
        }
    }
}
