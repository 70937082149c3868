//! The members leg of a code query: when the cursor follows `name.` or `path::`, the chunks
//! that define the members of what that chain leads to (a module of the repository, a type,
//! the enclosing class and its bases after `self.`; `outline.rs` resolves it, as it does for
//! completion's outlines). The callee is then one of those members, which the query's own
//! words rarely name: `crate::Error::` is followed by one of `Error`'s associated functions,
//! `f.` in a Go test by one of `FlagSet`'s methods. The leg ranks the members as the outline
//! does (what the access reaches first, then by how many chunks of the source use the name),
//! finds the chunk that defines each one in its file under the same filters as the other
//! legs, and the ranker weighs it with them (`ranker::MEMBER_FEATURES`).

use std::collections::HashMap;

use tabby_common::index::{
    IndexSchema,
    code::{fields, search_words},
};
use tantivy::{
    DocAddress, Searcher, Term,
    collector::DocSetCollector,
    query::{BooleanQuery, Occur, Query, TermQuery},
    schema::IndexRecordOption,
};

pub use super::outline::Member;
use super::{CodeSearchService, tie::TieKeys};

/// Members the leg keeps (the first ones), at most.
pub const MAX_MEMBERS: usize = 32;
/// Chunks whose stored names one request reads, at most, over all the members' files (a Go
/// type's members come from up to 17 files).
const MAX_CHUNKS_READ: usize = 512;

/// A members leg's hit: the chunk, its member's rank in the leg's order, and how many members
/// the chain's target has (a class with three methods says more than one with eighty).
#[derive(Clone, Copy, Debug)]
pub struct MemberHit {
    pub address: DocAddress,
    pub rank: usize,
    pub members: usize,
}

pub type MemberHits = Vec<MemberHit>;

/// The leg: for the first `MAX_MEMBERS` members, in order, the chunk of their file that
/// defines each (of the chunks that store its name as defined, the last that starts at or
/// before the member's line: the one with its header, not another type's member of the same
/// name) under `filters`. One search per file, for the chunks whose symbols hold one of its
/// members' names.
pub fn members_leg(
    searcher: &Searcher,
    members: &[Member],
    filters: impl Fn() -> Vec<(Occur, Box<dyn Query>)>,
) -> tantivy::Result<MemberHits> {
    let schema = IndexSchema::instance();
    let total = members.len();
    let members = &members[..total.min(MAX_MEMBERS)];
    let mut by_file: Vec<(&str, Vec<&str>)> = Vec::new();
    for m in members {
        match by_file.iter_mut().find(|(path, _)| *path == m.path) {
            Some((_, names)) => names.push(&m.name),
            None => by_file.push((&m.path, vec![&m.name])),
        }
    }
    // Per file and name, the chunks that store the name as defined: (first line, stable
    // key, address), in that order.
    let mut keys = TieKeys::new(searcher);
    let mut defining: HashMap<(&str, &str), Vec<(usize, u64, DocAddress)>> = HashMap::new();
    let mut budget = MAX_CHUNKS_READ;
    for (path, names) in &by_file {
        if budget == 0 {
            break;
        }
        let words: Vec<Box<dyn Query>> = names
            .iter()
            .filter_map(|name| search_words(name).into_iter().next())
            .map(|word| {
                Box::new(TermQuery::new(
                    Term::from_field_text(schema.field_chunk_symbols, &word),
                    IndexRecordOption::Basic,
                )) as Box<dyn Query>
            })
            .collect();
        if words.is_empty() {
            continue;
        }
        let mut clauses = filters();
        clauses.push((
            Occur::Must,
            IndexSchema::filter(schema.chunk_attribute_term(fields::CHUNK_FILEPATH, path)),
        ));
        clauses.push((Occur::Must, Box::new(BooleanQuery::union(words))));
        let mut found: Vec<(u64, DocAddress)> = searcher
            .search(&BooleanQuery::new(clauses), &DocSetCollector)?
            .into_iter()
            .map(|a| (keys.key(a), a))
            .collect();
        found.sort_unstable();
        let read = found.len().min(budget);
        budget -= read;
        for (key, address) in found.into_iter().take(read) {
            let Some(doc) = CodeSearchService::document(searcher, address) else {
                continue;
            };
            let first_line = doc.start_line.unwrap_or(1);
            for defined in doc.defines.iter().flatten() {
                if let Some(name) = names.iter().find(|n| **n == defined.as_str()) {
                    let chunks = defining.entry((path, name)).or_default();
                    chunks.push((first_line, key, address));
                }
            }
        }
    }
    let mut hits: MemberHits = Vec::new();
    for (rank, m) in members.iter().enumerate() {
        let Some(chunks) = defining.get_mut(&(m.path.as_str(), m.name.as_str())) else {
            continue;
        };
        chunks.sort_unstable();
        // Chunk lines count from 1; the member's line from 0.
        let chosen = match m.line {
            Some(line) => chunks
                .iter()
                .rev()
                .find(|(first, _, _)| *first <= line + 1)
                .or(chunks.first()),
            None => chunks.first(),
        };
        if let Some(&(_, _, address)) = chosen
            && !hits.iter().any(|h| h.address == address)
        {
            hits.push(MemberHit {
                address,
                rank,
                members: total,
            });
        }
    }
    Ok(hits)
}
