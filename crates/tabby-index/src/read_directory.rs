//! The directory the index writer works in: Tantivy's `MmapDirectory` for everything but
//! reading, which goes through `pread` instead of memory maps.
//!
//! A merge reads every page of the segments it merges. Through a memory map those pages count as
//! the process's resident memory until the map is dropped, so the final compaction of a 1 GB
//! corpus showed a peak RSS of 1.2 GB, most of it the index itself (README, "Indexing at
//! scale"). Read with `pread`, the same pages stay in the kernel's page cache, where they are
//! shared and dropped under pressure, and the process holds only the bytes Tantivy asks for.
//! Search keeps its memory maps (`services::code` opens the index on its own).
//!
//! A merge makes many small reads (a term's postings, a store block), each starting where the
//! last one ended, so a small read that follows the previous one reads a window of up to
//! [`WINDOW_BYTES`] ahead, and the reads inside it are copies instead of system calls; a small
//! read anywhere else (a lookup) reads only what it asks for. The copies are exact: nothing
//! Tantivy keeps pins a window.

use std::{
    fmt,
    fs::File,
    io,
    ops::Range,
    os::unix::fs::FileExt,
    path::{Path, PathBuf},
    sync::{Arc, Mutex},
};

use tantivy::{
    HasLen,
    directory::{
        Directory, DirectoryLock, FileHandle, Lock, MmapDirectory, OwnedBytes, WatchCallback,
        WatchHandle, WritePtr,
        error::{DeleteError, LockError, OpenReadError, OpenWriteError},
    },
};

/// Bytes read ahead for a small read; reads this large or larger are read as asked.
const WINDOW_BYTES: usize = 64 * 1024;

/// [`MmapDirectory`] whose files are read with `pread` (see the module docs).
#[derive(Clone, Debug)]
pub struct ReadDirectory {
    root: PathBuf,
    inner: MmapDirectory,
}

impl ReadDirectory {
    pub fn open(root: &Path) -> tantivy::Result<Self> {
        Ok(Self {
            root: root.to_path_buf(),
            inner: MmapDirectory::open(root)?,
        })
    }
}

impl Directory for ReadDirectory {
    fn get_file_handle(&self, path: &Path) -> Result<Arc<dyn FileHandle>, OpenReadError> {
        let file = File::open(self.root.join(path)).map_err(|e| {
            if e.kind() == io::ErrorKind::NotFound {
                OpenReadError::FileDoesNotExist(path.to_path_buf())
            } else {
                OpenReadError::wrap_io_error(e, path.to_path_buf())
            }
        })?;
        let len = file
            .metadata()
            .map_err(|e| OpenReadError::wrap_io_error(e, path.to_path_buf()))?
            .len() as usize;
        Ok(Arc::new(PreadFile {
            file,
            len,
            path: path.to_path_buf(),
            window: Mutex::new(Window::default()),
        }))
    }

    fn delete(&self, path: &Path) -> Result<(), DeleteError> {
        self.inner.delete(path)
    }

    fn exists(&self, path: &Path) -> Result<bool, OpenReadError> {
        self.inner.exists(path)
    }

    fn open_write(&self, path: &Path) -> Result<WritePtr, OpenWriteError> {
        self.inner.open_write(path)
    }

    fn atomic_read(&self, path: &Path) -> Result<Vec<u8>, OpenReadError> {
        self.inner.atomic_read(path)
    }

    fn atomic_write(&self, path: &Path, data: &[u8]) -> io::Result<()> {
        self.inner.atomic_write(path, data)
    }

    fn sync_directory(&self) -> io::Result<()> {
        self.inner.sync_directory()
    }

    fn acquire_lock(&self, lock: &Lock) -> Result<DirectoryLock, LockError> {
        self.inner.acquire_lock(lock)
    }

    fn watch(&self, watch_callback: WatchCallback) -> tantivy::Result<WatchHandle> {
        self.inner.watch(watch_callback)
    }
}

/// The bytes of `[start, start + bytes.len())` of a file, read ahead, and where the last read
/// ended.
#[derive(Default)]
struct Window {
    start: usize,
    bytes: Vec<u8>,
    next: usize,
}

/// A file read with `pread`. Index files are written once and never changed, so what a window
/// holds stays true while the handle lives.
struct PreadFile {
    file: File,
    len: usize,
    path: PathBuf,
    window: Mutex<Window>,
}

impl fmt::Debug for PreadFile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "PreadFile({:?}, {} bytes)", self.path, self.len)
    }
}

impl PreadFile {
    fn read_at(&self, range: Range<usize>) -> io::Result<Vec<u8>> {
        let mut bytes = vec![0; range.len()];
        self.file.read_exact_at(&mut bytes, range.start as u64)?;
        Ok(bytes)
    }
}

impl HasLen for PreadFile {
    fn len(&self) -> usize {
        self.len
    }
}

impl FileHandle for PreadFile {
    fn read_bytes(&self, range: Range<usize>) -> io::Result<OwnedBytes> {
        if range.start > range.end || range.end > self.len {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "read of {range:?} outside {:?} ({} bytes)",
                    self.path, self.len
                ),
            ));
        }
        if range.is_empty() {
            return Ok(OwnedBytes::empty());
        }
        if range.len() >= WINDOW_BYTES {
            return Ok(OwnedBytes::new(self.read_at(range)?));
        }
        let mut window = self.window.lock().unwrap_or_else(|e| e.into_inner());
        let inside = range.start >= window.start && range.end <= window.start + window.bytes.len();
        if !inside {
            // Read ahead only where reads follow one another (a merge walking a segment's
            // postings); a lookup elsewhere in the file reads what it asks for.
            if range.start != window.next {
                window.next = range.end;
                return Ok(OwnedBytes::new(self.read_at(range)?));
            }
            let end = (range.start + WINDOW_BYTES).min(self.len);
            window.bytes = self.read_at(range.start..end)?;
            window.start = range.start;
        }
        window.next = range.end;
        let from = range.start - window.start;
        Ok(OwnedBytes::new(
            window.bytes[from..from + range.len()].to_vec(),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file_of(bytes: &[u8]) -> (tempfile::TempDir, Arc<dyn FileHandle>) {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("f"), bytes).unwrap();
        let directory = ReadDirectory::open(dir.path()).unwrap();
        let handle = directory.get_file_handle(Path::new("f")).unwrap();
        (dir, handle)
    }

    #[test]
    fn reads_equal_the_file_at_every_offset_and_size() {
        let bytes: Vec<u8> = (0..3 * WINDOW_BYTES + 17)
            .map(|i| (i * 31 % 251) as u8)
            .collect();
        let (_dir, file) = file_of(&bytes);
        assert_eq!(file.len(), bytes.len());
        // Forwards, backwards, across and past window ends, and larger than a window.
        let mut ranges = vec![0..0, 0..1, 5..WINDOW_BYTES + 3, 0..bytes.len()];
        for start in (0..bytes.len()).step_by(4093) {
            for len in [1, 7, 4096, WINDOW_BYTES - 1, WINDOW_BYTES] {
                ranges.push(start..(start + len).min(bytes.len()));
            }
        }
        ranges.push(bytes.len() - 3..bytes.len());
        ranges.push(10..20);
        // Reads that follow one another, as a merge makes them (through read-ahead windows).
        let mut at = 3;
        for len in (1..).map(|i| i * 37 % 1000 + 1) {
            if at + len > bytes.len() {
                break;
            }
            ranges.push(at..at + len);
            at += len;
        }
        for range in ranges {
            let read = file.read_bytes(range.clone()).unwrap();
            assert_eq!(read.as_slice(), &bytes[range.clone()], "{range:?}");
        }
        let past = file
            .read_bytes(bytes.len() - 1..bytes.len() + 1)
            .unwrap_err();
        assert_eq!(past.kind(), io::ErrorKind::InvalidInput);
    }

    #[test]
    fn missing_files_are_reported_as_missing() {
        let dir = tempfile::tempdir().unwrap();
        let directory = ReadDirectory::open(dir.path()).unwrap();
        assert!(matches!(
            directory.get_file_handle(Path::new("absent")),
            Err(OpenReadError::FileDoesNotExist(_))
        ));
    }
}
