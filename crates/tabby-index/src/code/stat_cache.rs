//! Blob ids of a plain directory's files, remembered by their metadata between runs, as git's
//! index does for a working tree: a file whose size, modification time, change time and inode
//! are what they were when its id was computed is not read again to learn that it is unchanged.
//! Without it, every run of an unchanged 10k-file directory read and hashed every byte of it.
//!
//! One file per source under the index directory, written after a run. An entry is trusted only
//! if the file had not been modified for a while when it was recorded (a file changed twice within
//! the file system's timestamp resolution could otherwise keep its old id: git's "racy clean"
//! case); such files are hashed again on the next run. The cache only saves reading: the id it
//! gives is still looked up in the index, and a wrong or damaged cache file at worst costs a
//! re-read of the files it names.

use std::{
    collections::HashMap,
    fs::Metadata,
    io::{BufWriter, Write},
    path::{Path, PathBuf},
    time::{Duration, SystemTime, UNIX_EPOCH},
};

/// The first line of a cache file; other contents are ignored (and the cache starts empty).
const HEADER: &str = "tabby-stat-cache v1";
/// A file modified less than this before it was recorded is not trusted on the next run.
const RACY_WINDOW: Duration = Duration::from_secs(2);

/// What identifies a file's content without reading it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct FileStamp {
    size: u64,
    mtime_ns: i128,
    ctime_ns: i128,
    inode: u64,
}

impl FileStamp {
    pub fn of(metadata: &Metadata) -> FileStamp {
        let ns = |t: std::io::Result<SystemTime>| t.map(system_time_ns).unwrap_or(0);
        #[cfg(unix)]
        let (ctime_ns, inode) = {
            use std::os::unix::fs::MetadataExt;
            (
                metadata.ctime() as i128 * 1_000_000_000 + metadata.ctime_nsec() as i128,
                metadata.ino(),
            )
        };
        #[cfg(not(unix))]
        let (ctime_ns, inode) = (ns(metadata.created()), 0);
        FileStamp {
            size: metadata.len(),
            mtime_ns: ns(metadata.modified()),
            ctime_ns,
            inode,
        }
    }

    pub fn size(&self) -> u64 {
        self.size
    }

    /// Whether the file was last changed (content or metadata) at least [`RACY_WINDOW`] before
    /// `now_ns`.
    fn settled_at(&self, now_ns: i128) -> bool {
        let window = RACY_WINDOW.as_nanos() as i128;
        self.mtime_ns.max(self.ctime_ns) + window <= now_ns
    }
}

fn system_time_ns(t: SystemTime) -> i128 {
    match t.duration_since(UNIX_EPOCH) {
        Ok(d) => d.as_nanos() as i128,
        Err(e) => -(e.duration().as_nanos() as i128),
    }
}

/// Blob ids by relative path, as read from a source's cache file.
#[derive(Default)]
pub(crate) struct StatCache {
    entries: HashMap<String, (FileStamp, String)>,
}

/// The ids learnt during a run, written for the next one.
#[derive(Default)]
pub(crate) struct StatCacheUpdate {
    entries: Vec<(String, FileStamp, String)>,
}

impl StatCache {
    /// The cache file of source `source_id` under the index directory `dir` (the source id
    /// is hashed into the name, so no configured value becomes a path).
    pub fn path(dir: &Path, source_id: &str) -> PathBuf {
        let digest = git2::Oid::hash_object(git2::ObjectType::Blob, source_id.as_bytes())
            .map(|oid| oid.to_string())
            .unwrap_or_default();
        dir.join("stat-cache").join(format!("{digest}.tsv"))
    }

    /// Reads a cache file; a missing or unreadable one gives an empty cache.
    pub fn load(path: &Path) -> StatCache {
        let Ok(text) = std::fs::read_to_string(path) else {
            return StatCache::default();
        };
        let mut lines = text.lines();
        if lines.next() != Some(HEADER) {
            return StatCache::default();
        }
        let entries = lines
            .filter_map(|line| {
                let mut parts = line.splitn(6, '\t');
                let stamp = FileStamp {
                    size: parts.next()?.parse().ok()?,
                    mtime_ns: parts.next()?.parse().ok()?,
                    ctime_ns: parts.next()?.parse().ok()?,
                    inode: parts.next()?.parse().ok()?,
                };
                let hash = parts.next()?;
                let rel = parts.next()?;
                (hash.len() == 40 && hash.bytes().all(|b| b.is_ascii_hexdigit()))
                    .then(|| (rel.to_string(), (stamp, hash.to_string())))
            })
            .collect();
        StatCache { entries }
    }

    /// The id recorded for `rel` if the file still has the same stamp.
    pub fn lookup(&self, rel: &str, stamp: &FileStamp) -> Option<&str> {
        match self.entries.get(rel) {
            Some((recorded, hash)) if recorded == stamp => Some(hash),
            _ => None,
        }
    }
}

impl StatCacheUpdate {
    pub fn record(&mut self, rel: &str, stamp: FileStamp, hash: &str) {
        // A path with a line break cannot be written on one line; it is hashed on each run.
        if !rel.contains(['\n', '\r']) {
            self.entries
                .push((rel.to_string(), stamp, hash.to_string()));
        }
    }

    /// Writes the entries of files that had settled by now (atomically: a temporary file
    /// renamed over the old one).
    pub fn save(&self, path: &Path) -> std::io::Result<()> {
        let now_ns = system_time_ns(SystemTime::now());
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)?;
        }
        let partial = path.with_extension("tsv.partial");
        {
            let mut out = BufWriter::new(std::fs::File::create(&partial)?);
            writeln!(out, "{HEADER}")?;
            for (rel, stamp, hash) in &self.entries {
                if stamp.settled_at(now_ns) {
                    writeln!(
                        out,
                        "{}\t{}\t{}\t{}\t{hash}\t{rel}",
                        stamp.size, stamp.mtime_ns, stamp.ctime_ns, stamp.inode
                    )?;
                }
            }
            out.into_inner().map_err(|e| e.into_error())?.sync_all()?;
        }
        std::fs::rename(&partial, path)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stamp_of(path: &Path) -> FileStamp {
        FileStamp::of(&std::fs::metadata(path).unwrap())
    }

    #[test]
    fn a_settled_file_is_found_and_any_change_to_it_misses() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("a.rs");
        std::fs::write(&file, "fn a() {}\n").unwrap();
        let cache_file = StatCache::path(dir.path(), "source-1");
        let hash = "0123456789abcdef0123456789abcdef01234567";
        let mut stamp = stamp_of(&file);
        assert!(!stamp.settled_at(system_time_ns(SystemTime::now())));
        // As if the file had last changed a minute ago.
        stamp.mtime_ns -= 60_000_000_000;
        stamp.ctime_ns -= 60_000_000_000;
        let mut update = StatCacheUpdate::default();
        update.record("a.rs", stamp, hash);
        update.save(&cache_file).unwrap();

        let cache = StatCache::load(&cache_file);
        let recorded = stamp;
        assert_eq!(cache.lookup("a.rs", &recorded), Some(hash));
        assert_eq!(cache.lookup("b.rs", &recorded), None);
        for changed in [
            FileStamp {
                size: recorded.size + 1,
                ..recorded
            },
            FileStamp {
                mtime_ns: recorded.mtime_ns + 1,
                ..recorded
            },
            FileStamp {
                ctime_ns: recorded.ctime_ns + 1,
                ..recorded
            },
            FileStamp {
                inode: recorded.inode + 1,
                ..recorded
            },
        ] {
            assert_eq!(cache.lookup("a.rs", &changed), None, "{changed:?}");
        }
    }

    #[test]
    fn a_file_changed_just_before_the_run_is_not_recorded() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("a.rs");
        std::fs::write(&file, "fn a() {}\n").unwrap();
        let cache_file = StatCache::path(dir.path(), "s");
        let mut update = StatCacheUpdate::default();
        let stamp = stamp_of(&file);
        update.record("a.rs", stamp, "0123456789abcdef0123456789abcdef01234567");
        update.save(&cache_file).unwrap();
        assert_eq!(StatCache::load(&cache_file).lookup("a.rs", &stamp), None);
    }

    #[test]
    fn damaged_or_foreign_cache_files_give_an_empty_cache() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.tsv");
        let stamp = FileStamp {
            size: 3,
            mtime_ns: 1,
            ctime_ns: 1,
            inode: 7,
        };
        for text in [
            "",
            "not a cache\n3\t1\t1\t7\t0123456789abcdef0123456789abcdef01234567\ta.rs\n",
            "tabby-stat-cache v1\n3\t1\t1\t7\tnot-a-hash\ta.rs\n",
            "tabby-stat-cache v1\nx\t1\t1\t7\t0123456789abcdef0123456789abcdef01234567\ta.rs\n",
            "tabby-stat-cache v1\n3\t1\t1\t7\t0123456789abcdef0123456789abcdef01234567\n",
        ] {
            std::fs::write(&path, text).unwrap();
            assert_eq!(
                StatCache::load(&path).lookup("a.rs", &stamp),
                None,
                "{text:?}"
            );
        }
        std::fs::write(
            &path,
            "tabby-stat-cache v1\n3\t1\t1\t7\t0123456789abcdef0123456789abcdef01234567\ta\tb.rs\n",
        )
        .unwrap();
        assert!(StatCache::load(&path).lookup("a\tb.rs", &stamp).is_some());
    }

    #[test]
    fn paths_that_cannot_be_written_on_a_line_are_left_out() {
        let mut update = StatCacheUpdate::default();
        let stamp = FileStamp {
            size: 1,
            mtime_ns: 0,
            ctime_ns: 0,
            inode: 1,
        };
        update.record("a\nb.rs", stamp, "0123456789abcdef0123456789abcdef01234567");
        update.record("a\rb.rs", stamp, "0123456789abcdef0123456789abcdef01234567");
        assert!(update.entries.is_empty());
        update.record("a\tb.rs", stamp, "0123456789abcdef0123456789abcdef01234567");
        assert_eq!(update.entries.len(), 1);
    }

    #[test]
    fn each_source_has_its_own_file_under_the_index_dir() {
        let dir = Path::new("/idx");
        let a = StatCache::path(dir, "../../etc/passwd");
        assert!(a.starts_with("/idx/stat-cache"));
        assert_ne!(a, StatCache::path(dir, "other"));
    }
}
