//! Index snapshots for replicas on several machines: the process that writes the index
//! publishes each committed version of it as an immutable directory under a shared
//! `snapshot_dir` (a network volume), and web replicas elsewhere search the newest one.
//!
//! Layout of `snapshot_dir`: one directory per version (`<unix millis>-<fingerprint>`) holding
//! Tantivy's `meta.json` as it was read, every file of the segments it lists, and
//! `tabby-index.json`; and `CURRENT`, naming the newest. Publishing copies into a hidden
//! `.tmp-…` directory, renames it into place, then replaces `CURRENT` by a rename, so a
//! reader sees either the old version or the whole new one. A reader keeps its open version
//! until `CURRENT` names another; versions are pruned only when [`KEEP`] newer ones exist and
//! they are older than [`KEEP_AT_LEAST`], by which time readers have moved on (and on Unix an
//! open file outlives its name anyway).

use std::{
    collections::HashSet,
    path::{Path, PathBuf},
    time::{Duration, SystemTime, UNIX_EPOCH},
};

use anyhow::{Context, bail};

/// The file naming the newest version.
pub const CURRENT: &str = "CURRENT";
/// Versions kept besides the newest ones, at least.
pub const KEEP: usize = 3;
/// Versions younger than this are never pruned.
pub const KEEP_AT_LEAST: Duration = Duration::from_secs(600);
/// Tantivy's commit record.
const TANTIVY_META: &str = "meta.json";
/// Our own metadata (chunker, embedding model), see [`crate::meta`].
const TABBY_META: &str = "tabby-index.json";

/// Where readers find the index: the local directory the indexer writes, or the newest
/// snapshot published under a shared directory.
#[derive(Clone, Debug, PartialEq)]
pub enum IndexLocation {
    Local(PathBuf),
    Snapshots(PathBuf),
}

impl IndexLocation {
    /// The directory to open now (`None`: no snapshot published yet).
    pub fn dir(&self) -> Option<PathBuf> {
        match self {
            IndexLocation::Local(dir) => Some(dir.clone()),
            IndexLocation::Snapshots(shared) => current(shared),
        }
    }
}

impl From<PathBuf> for IndexLocation {
    fn from(dir: PathBuf) -> Self {
        IndexLocation::Local(dir)
    }
}

/// Publishes the index in `index_dir` as a new version under `snapshot_dir` unless the newest
/// version already is this commit; the new version's directory, if one was made. Fails (and
/// leaves `CURRENT` as it was) when a file of the commit disappears while it is copied, i.e.
/// when a newer commit landed meanwhile: the next call publishes that one.
pub fn publish(index_dir: &Path, snapshot_dir: &Path) -> anyhow::Result<Option<PathBuf>> {
    let meta = match std::fs::read(index_dir.join(TANTIVY_META)) {
        Ok(meta) => meta,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e).context("cannot read the index's meta.json"),
    };
    let tabby_meta = std::fs::read(index_dir.join(TABBY_META)).ok();
    let fingerprint = fingerprint(&meta, tabby_meta.as_deref());
    if let Some(current) = current(snapshot_dir)
        && current
            .file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| n.ends_with(&format!("-{fingerprint}")))
    {
        return Ok(None);
    }
    let segments = segment_files(&meta)?;
    std::fs::create_dir_all(snapshot_dir)
        .with_context(|| format!("cannot create {}", snapshot_dir.display()))?;
    let millis = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_millis();
    let version = format!("{millis:013}-{fingerprint}");
    let staging = snapshot_dir.join(format!(".tmp-{version}"));
    let _ = std::fs::remove_dir_all(&staging);
    std::fs::create_dir(&staging)
        .with_context(|| format!("cannot create {}", staging.display()))?;
    let copied = (|| -> anyhow::Result<()> {
        for entry in std::fs::read_dir(index_dir)? {
            let entry = entry?;
            let name = entry.file_name();
            let Some(name) = name.to_str() else { continue };
            let segment = name.split('.').next().unwrap_or_default();
            if segments.contains(segment) && entry.file_type()?.is_file() {
                link_or_copy(&entry.path(), &staging.join(name))?;
            }
        }
        std::fs::write(staging.join(TANTIVY_META), &meta)?;
        if let Some(tabby_meta) = &tabby_meta {
            std::fs::write(staging.join(TABBY_META), tabby_meta)?;
        }
        Ok(())
    })();
    if let Err(e) = copied {
        let _ = std::fs::remove_dir_all(&staging);
        return Err(e.context("cannot copy the index into a snapshot"));
    }
    let published = snapshot_dir.join(&version);
    std::fs::rename(&staging, &published)
        .with_context(|| format!("cannot publish {}", published.display()))?;
    let pointer = snapshot_dir.join(format!(".{CURRENT}.tmp"));
    std::fs::write(&pointer, format!("{version}\n"))?;
    std::fs::rename(&pointer, snapshot_dir.join(CURRENT))?;
    prune(snapshot_dir, &version, KEEP_AT_LEAST)?;
    Ok(Some(published))
}

/// The newest published version's directory, if `CURRENT` names one that exists. Only a name
/// of the form publishing gives is followed, so `CURRENT` only ever names a direct child.
pub fn current(snapshot_dir: &Path) -> Option<PathBuf> {
    let name = std::fs::read_to_string(snapshot_dir.join(CURRENT)).ok()?;
    let name = name.trim();
    if !is_published_name(name) {
        return None;
    }
    let dir = snapshot_dir.join(name);
    dir.join(TANTIVY_META).is_file().then_some(dir)
}

/// `<13 digits>-<hex>`: a name [`publish`] gives a version.
fn is_published_name(name: &str) -> bool {
    name.split_once('-').is_some_and(|(millis, fingerprint)| {
        millis.len() == 13
            && millis.bytes().all(|b| b.is_ascii_digit())
            && !fingerprint.is_empty()
            && fingerprint.bytes().all(|b| b.is_ascii_hexdigit())
    })
}

/// The file-name stems (segment ids, 32 hex digits) of the segments a `meta.json` lists.
fn segment_files(meta: &[u8]) -> anyhow::Result<HashSet<String>> {
    let meta: serde_json::Value =
        serde_json::from_slice(meta).context("the index's meta.json is not JSON")?;
    let Some(segments) = meta.get("segments").and_then(|s| s.as_array()) else {
        bail!("the index's meta.json lists no segments");
    };
    segments
        .iter()
        .map(|segment| {
            segment
                .get("segment_id")
                .and_then(|id| id.as_str())
                .map(|id| id.replace('-', ""))
                .context("a segment of meta.json has no segment_id")
        })
        .collect()
}

/// A short hash of the commit (FNV-1a, 64 bits, as hex): equal commits, equal names.
fn fingerprint(meta: &[u8], tabby_meta: Option<&[u8]>) -> String {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in meta
        .iter()
        .chain(b"\0")
        .chain(tabby_meta.unwrap_or_default())
    {
        hash ^= u64::from(*byte);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    format!("{hash:016x}")
}

/// A hard link where the two directories share a file system (segment files are immutable),
/// else a copy.
fn link_or_copy(from: &Path, to: &Path) -> std::io::Result<()> {
    if std::fs::hard_link(from, to).is_ok() {
        return Ok(());
    }
    std::fs::copy(from, to).map(|_| ())
}

/// Removes versions (and abandoned staging directories) beyond the newest [`KEEP`] that are
/// older than `keep_at_least`; never `newest`.
fn prune(snapshot_dir: &Path, newest: &str, keep_at_least: Duration) -> anyhow::Result<()> {
    let mut versions: Vec<(String, SystemTime)> = Vec::new();
    for entry in std::fs::read_dir(snapshot_dir)? {
        let entry = entry?;
        if !entry.file_type()?.is_dir() {
            continue;
        }
        let Some(name) = entry.file_name().to_str().map(str::to_owned) else {
            continue;
        };
        // Only what publishing made: the directory may hold other things (the mirrors).
        if !is_published_name(name.trim_start_matches(".tmp-")) {
            continue;
        }
        let modified = entry
            .metadata()
            .and_then(|m| m.modified())
            .unwrap_or(SystemTime::UNIX_EPOCH);
        versions.push((name, modified));
    }
    // Version names start with the publication time: newest first.
    versions.sort_by(|a, b| {
        b.0.trim_start_matches(".tmp-")
            .cmp(a.0.trim_start_matches(".tmp-"))
    });
    let now = SystemTime::now();
    let mut kept = 0;
    for (name, modified) in versions {
        let old = now.duration_since(modified).unwrap_or_default() >= keep_at_least;
        if name == newest {
            continue;
        }
        if name.starts_with(".tmp-") {
            if old {
                let _ = std::fs::remove_dir_all(snapshot_dir.join(&name));
            }
            continue;
        }
        kept += 1;
        if kept > KEEP && old {
            std::fs::remove_dir_all(snapshot_dir.join(&name))
                .with_context(|| format!("cannot prune snapshot {name}"))?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use tantivy::{
        Index, TantivyDocument,
        schema::{STORED, Schema, TEXT},
    };

    use super::*;

    fn add(index: &Index, text: &str) {
        let field = index.schema().get_field("text").unwrap();
        let mut writer = index.writer::<TantivyDocument>(15_000_000).unwrap();
        let mut doc = TantivyDocument::default();
        doc.add_text(field, text);
        writer.add_document(doc).unwrap();
        writer.commit().unwrap();
        writer.wait_merging_threads().unwrap();
    }

    fn docs(dir: &Path) -> u64 {
        Index::open_in_dir(dir)
            .unwrap()
            .reader()
            .unwrap()
            .searcher()
            .num_docs()
    }

    #[test]
    fn versions_are_published_whole_once_per_commit_and_readers_keep_theirs() {
        let tmp = tempfile::tempdir().unwrap();
        let (index_dir, shared) = (tmp.path().join("index"), tmp.path().join("shared"));
        std::fs::create_dir(&index_dir).unwrap();
        assert!(
            publish(&index_dir, &shared).unwrap().is_none(),
            "no index yet"
        );
        assert!(current(&shared).is_none());

        let mut schema = Schema::builder();
        schema.add_text_field("text", TEXT | STORED);
        let index = Index::create_in_dir(&index_dir, schema.build()).unwrap();
        std::fs::write(index_dir.join(TABBY_META), "{\"schema_version\": 1}").unwrap();
        add(&index, "first");
        let v1 = publish(&index_dir, &shared)
            .unwrap()
            .expect("a first version");
        assert_eq!(current(&shared).as_deref(), Some(v1.as_path()));
        assert_eq!(docs(&v1), 1);
        assert!(v1.join(TABBY_META).is_file());
        assert!(
            publish(&index_dir, &shared).unwrap().is_none(),
            "same commit"
        );

        let reader = Index::open_in_dir(&v1).unwrap().reader().unwrap();
        add(&index, "second");
        let v2 = publish(&index_dir, &shared)
            .unwrap()
            .expect("a second version");
        // Only the files of the commit: nothing of the writer's lock or other state.
        for entry in std::fs::read_dir(&v2).unwrap() {
            let name = entry.unwrap().file_name().into_string().unwrap();
            assert!(!name.contains("lock") && !name.starts_with('.'), "{name}");
        }
        assert_ne!(v1, v2);
        assert_eq!(current(&shared).as_deref(), Some(v2.as_path()));
        assert_eq!(docs(&v2), 2);
        assert_eq!(
            reader.searcher().num_docs(),
            1,
            "a reader keeps its version"
        );
        // No staging directory left behind.
        assert!(std::fs::read_dir(&shared).unwrap().all(|e| {
            !e.unwrap()
                .file_name()
                .to_string_lossy()
                .starts_with(".tmp-")
        }));
    }

    #[test]
    fn current_names_only_a_published_child() {
        let tmp = tempfile::tempdir().unwrap();
        let shared = tmp.path();
        let version = tmp.path().join("0000000000001-abc");
        let outside = tmp.path().join("outside");
        for dir in [&version, &outside] {
            std::fs::create_dir_all(dir).unwrap();
            std::fs::write(dir.join(TANTIVY_META), "{}").unwrap();
        }
        for bad in [
            "../outside",
            "outside",
            "/etc",
            ".tmp-0000000000001-abc",
            "",
            "a/b",
            "0000000000001-abc/../outside",
        ] {
            std::fs::write(shared.join(CURRENT), bad).unwrap();
            assert!(current(shared).is_none(), "{bad:?}");
        }
        std::fs::write(shared.join(CURRENT), "0000000000001-abc\n").unwrap();
        assert_eq!(current(shared), Some(version));
        std::fs::write(shared.join(CURRENT), "0000000000002-abc").unwrap();
        assert!(current(shared).is_none());
    }

    #[test]
    fn pruning_keeps_the_newest_versions() {
        let tmp = tempfile::tempdir().unwrap();
        let shared = tmp.path();
        let names: Vec<String> = (1..=6).map(|i| format!("{i:013}-abc")).collect();
        for name in &names {
            std::fs::create_dir(shared.join(name)).unwrap();
        }
        std::fs::create_dir(shared.join(".tmp-0000000000009-abc")).unwrap();
        // Not made by publishing (one sorts after the versions, one before): never pruned.
        std::fs::create_dir(shared.join("repositories")).unwrap();
        std::fs::create_dir(shared.join("000-other")).unwrap();
        prune(shared, &names[5], Duration::from_secs(3600)).unwrap();
        assert_eq!(
            std::fs::read_dir(shared).unwrap().count(),
            9,
            "all too young"
        );
        prune(shared, &names[5], Duration::ZERO).unwrap();
        let mut left: Vec<String> = std::fs::read_dir(shared)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        left.sort();
        let mut expected = vec!["000-other".to_string()];
        expected.extend(names[2..].iter().cloned());
        expected.push("repositories".into());
        assert_eq!(
            left, expected,
            "the newest, KEEP more, and what publishing did not make"
        );
    }
}
