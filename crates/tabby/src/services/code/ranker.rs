//! The learned ranker: orders the union of the legs' candidates by a score over features
//! that are cheap at query time: each leg's score and rank (for a code query in a file, also
//! the names leg's: `file_names.rs`), the chunk's test and definition flags, and how the
//! chunk's own words, definition name and path meet the query's (`content`, read from the
//! stored chunk). The file may bound how many candidates only the names leg found an answer
//! keeps (`names_cap`). One scorer per kind of query: code (an editor's
//! prefix: several lines, or a file being edited) and natural language (a question, a task).
//! A kind's scorer is either linear (one weight per feature) or a sum of regression trees
//! (LambdaMART).
//!
//! The file is small, versioned JSON trained on sets generated from registry packages
//! (`scripts/eval/training_sets.py`), none of them reserved for evaluation: linear weights by
//! `scripts/eval/train_ranker.py`, trees by `scripts/eval/train_ranker_trees.py`; the file
//! records how it was trained and on which sets. The one shipped is compiled in
//! (`assets/ranker.json`); `tabby eval --ranker FILE` measures another without a rebuild.

use std::{
    collections::HashMap,
    path::Path,
    sync::{Arc, OnceLock},
};

use serde::Deserialize;
use tabby_common::api::code::CodeSearchScores;
use tantivy::{DocAddress, Searcher};

use super::{
    Fused, LegHits, RRF_K, RowColumns, content,
    file_names::{MAX_NAMES, NameHit, NameHits},
    members::{MAX_MEMBERS, MemberHit, MemberHits},
};

/// Features computed from the legs' ranks and scores and the chunk's flags.
const RANK_FEATURES: [&str; 14] = [
    "bias",
    "bm25_in",
    "bm25_rel",
    "bm25_rr",
    "bm25_log_rank",
    "emb_in",
    "emb_score",
    "emb_gap",
    "emb_rr",
    "emb_log_rank",
    "both",
    "in_test",
    "defines",
    "rrf",
];
const N_RANK_FEATURES: usize = RANK_FEATURES.len();
/// Where `bm25_in` and `emb_in` are (whether that leg found the candidate).
const BM25_IN: usize = 1;
const EMB_IN: usize = 5;
/// Features of the names leg (`file_names.rs`): whether it found the chunk, the reciprocal
/// rank of its name, that rank on a log scale (1 when it did not find it), and how rare the
/// name is among the chunks' symbols (1 / (1 + ln of the chunks that hold it)). They come last, so that the
/// features before them keep their places.
pub const NAME_FEATURES: [&str; 4] = ["names_in", "names_rr", "names_log_rank", "names_rare"];
/// Features of the members leg (`members.rs`): whether it found the chunk, the reciprocal rank
/// of its member, that rank on a log scale (1 when it did not find it), and how few members
/// the target has (1 / (1 + ln of their number)). They come after the names leg's.
pub const MEMBER_FEATURES: [&str; 4] = [
    "members_in",
    "members_rr",
    "members_log_rank",
    "members_few",
];
const N_CONTENT_END: usize = N_RANK_FEATURES + content::NAMES.len();
const N_NAMES_END: usize = N_CONTENT_END + NAME_FEATURES.len();
pub const N_FEATURES: usize = N_NAMES_END + MEMBER_FEATURES.len();

/// The features, in the order the weights are given: the rank features, then the candidate's
/// words, names and path against the query's (`content::NAMES`), then the names leg's
/// (`NAME_FEATURES`) and the members leg's (`MEMBER_FEATURES`). A ranker file names them; one
/// trained on another list is refused, unless its list is this one up to the end of a leg's
/// features (a file written before the later legs: they weigh nothing in it).
pub const FEATURES: [&str; N_FEATURES] = {
    let mut all = [""; N_FEATURES];
    let mut i = 0;
    while i < N_FEATURES {
        all[i] = if i < N_RANK_FEATURES {
            RANK_FEATURES[i]
        } else if i < N_CONTENT_END {
            content::NAMES[i - N_RANK_FEATURES]
        } else if i < N_NAMES_END {
            NAME_FEATURES[i - N_CONTENT_END]
        } else {
            MEMBER_FEATURES[i - N_NAMES_END]
        };
        i += 1;
    }
    all
};

const BUILTIN: &str = include_str!("../../../assets/ranker.json");

/// What kind of text a query is; each has its own weights.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum QueryKind {
    /// Code before a cursor (several lines, or a request from a file being edited).
    Code,
    /// A question or a task in words.
    Nl,
}

impl QueryKind {
    pub fn of(content: &str, filepath: Option<&str>) -> Self {
        if filepath.is_some() || content.trim_end().contains('\n') {
            QueryKind::Code
        } else {
            QueryKind::Nl
        }
    }
}

/// Bounds on a file's trees, which bound the cost of scoring a candidate (and, with the
/// leaves' size, keep a sum of leaves finite).
const MAX_TREES: usize = 5_000;
const MAX_NODES: usize = 1_024;
const MAX_LEAF: f64 = 1e6;

#[derive(Deserialize)]
struct RankerFile {
    version: String,
    features: Vec<String>,
    #[serde(default)]
    weights: HashMap<String, Vec<f32>>,
    #[serde(default)]
    trees: HashMap<String, Vec<TreeFile>>,
    /// How many candidates that only the names leg found an answer keeps (the best ones);
    /// none: no bound.
    #[serde(default)]
    names_cap: Option<usize>,
    /// The same for the members leg.
    #[serde(default)]
    members_cap: Option<usize>,
}

/// A regression tree as written: `nodes[i] = [feature, threshold, left, right]`, where a
/// child `c >= 0` is node `c` (always after its parent) and `c < 0` is leaf `-1 - c`; a
/// candidate goes left when its feature is at most the threshold. A tree without nodes is
/// its one leaf.
#[derive(Deserialize)]
struct TreeFile {
    nodes: Vec<(usize, f64, i64, i64)>,
    leaves: Vec<f64>,
}

#[derive(Debug)]
struct Node {
    feature: usize,
    threshold: f64,
    left: i64,
    right: i64,
}

#[derive(Debug)]
struct Tree {
    nodes: Vec<Node>,
    leaves: Vec<f64>,
}

impl Tree {
    /// `given`: how many features the file names (a node reads one of them).
    fn check(file: TreeFile, given: usize) -> Result<Tree, String> {
        let TreeFile { nodes, leaves } = file;
        if leaves.is_empty() || leaves.iter().any(|v| !v.is_finite() || v.abs() > MAX_LEAF) {
            return Err(format!("leaves that are missing or not within ±{MAX_LEAF}"));
        }
        if nodes.len() > MAX_NODES {
            return Err(format!("more than {MAX_NODES} nodes"));
        }
        if nodes.is_empty() && leaves.len() != 1 {
            return Err("no nodes but several leaves".into());
        }
        for (i, &(feature, threshold, left, right)) in nodes.iter().enumerate() {
            if feature >= given || !threshold.is_finite() {
                return Err(format!(
                    "node {i}: feature {feature}, threshold {threshold}"
                ));
            }
            for child in [left, right] {
                // A node's children come after it, so that every walk ends.
                let ok = if child >= 0 {
                    child as usize > i && (child as usize) < nodes.len()
                } else {
                    ((-1 - child) as u64) < leaves.len() as u64
                };
                if !ok {
                    return Err(format!("node {i}: child {child} out of order or range"));
                }
            }
        }
        let nodes = nodes
            .into_iter()
            .map(|(feature, threshold, left, right)| Node {
                feature,
                threshold,
                left,
                right,
            })
            .collect();
        Ok(Tree { nodes, leaves })
    }

    fn score(&self, x: &[f32; N_FEATURES]) -> f64 {
        if self.nodes.is_empty() {
            return self.leaves[0];
        }
        let mut i = 0;
        loop {
            let node = &self.nodes[i];
            let next = if f64::from(x[node.feature]) <= node.threshold {
                node.left
            } else {
                node.right
            };
            if next < 0 {
                return self.leaves[(-1 - next) as usize];
            }
            i = next as usize;
        }
    }
}

/// How one kind of query scores a candidate.
#[derive(Debug)]
enum Scorer {
    Linear([f32; N_FEATURES]),
    Trees(Vec<Tree>),
}

impl Scorer {
    fn score(&self, x: &[f32; N_FEATURES]) -> f32 {
        match self {
            Scorer::Linear(w) => dot(w, x),
            Scorer::Trees(trees) => trees.iter().map(|t| t.score(x)).sum::<f64>() as f32,
        }
    }

    fn reads(&self, features: std::ops::Range<usize>) -> bool {
        match self {
            Scorer::Linear(w) => w[features].iter().any(|x| *x != 0.0),
            Scorer::Trees(trees) => trees
                .iter()
                .any(|t| t.nodes.iter().any(|n| features.contains(&n.feature))),
        }
    }

    fn reads_content(&self) -> bool {
        self.reads(N_RANK_FEATURES..N_CONTENT_END)
    }

    fn reads_names(&self) -> bool {
        self.reads(N_CONTENT_END..N_NAMES_END)
    }

    fn reads_members(&self) -> bool {
        self.reads(N_NAMES_END..N_FEATURES)
    }
}

#[derive(Debug)]
pub struct Ranker {
    pub version: String,
    code: Scorer,
    nl: Scorer,
    /// Candidates only the names leg found that one answer keeps, at most (the file's
    /// `names_cap`): the leg finds a callee often, but fills a list with its neighbours too.
    names_cap: usize,
    /// The same for the members leg (`members_cap`).
    members_cap: usize,
}

impl Ranker {
    pub fn parse(text: &str) -> anyhow::Result<Ranker> {
        let mut file: RankerFile =
            serde_json::from_str(text).map_err(|e| anyhow::anyhow!("not a ranker file: {e}"))?;
        // A file written before a leg's features were added (one that names the features up
        // to the end of the content's or the names leg's) weighs the later ones 0.
        let given = file.features.len();
        if ![N_CONTENT_END, N_NAMES_END, N_FEATURES].contains(&given)
            || file.features[..] != FEATURES[..given]
        {
            anyhow::bail!(
                "the ranker {} was trained on the features {:?}; this build computes {:?}",
                file.version,
                file.features,
                FEATURES
            );
        }
        let mut scorer = |kind: &str| -> anyhow::Result<Scorer> {
            match (file.weights.remove(kind), file.trees.remove(kind)) {
                (Some(_), Some(_)) => {
                    anyhow::bail!("the ranker has both weights and trees for {kind} queries")
                }
                (None, None) => {
                    anyhow::bail!("the ranker has no weights or trees for {kind} queries")
                }
                (Some(w), None) => {
                    if w.len() != given {
                        anyhow::bail!("the ranker's {kind} weights are not {given} numbers");
                    }
                    let mut all = [0.0f32; N_FEATURES];
                    all[..given].copy_from_slice(&w);
                    let w = all;
                    if w.iter().any(|x| !x.is_finite()) {
                        anyhow::bail!("the ranker's {kind} weights are not all finite numbers");
                    }
                    Ok(Scorer::Linear(w))
                }
                (None, Some(trees)) => {
                    if trees.is_empty() || trees.len() > MAX_TREES {
                        anyhow::bail!("the ranker's {kind} trees: not 1 to {MAX_TREES} of them");
                    }
                    let trees = trees
                        .into_iter()
                        .enumerate()
                        .map(|(i, t)| {
                            Tree::check(t, given).map_err(|e| {
                                anyhow::anyhow!("the ranker's {kind} tree {i} is invalid: {e}")
                            })
                        })
                        .collect::<anyhow::Result<Vec<_>>>()?;
                    Ok(Scorer::Trees(trees))
                }
            }
        };
        let code = scorer("code")?;
        let nl = scorer("nl")?;
        Ok(Ranker {
            code,
            nl,
            version: file.version,
            names_cap: file.names_cap.unwrap_or(usize::MAX),
            members_cap: file.members_cap.unwrap_or(usize::MAX),
        })
    }

    pub fn load(path: &Path) -> anyhow::Result<Ranker> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| anyhow::anyhow!("cannot read {}: {e}", path.display()))?;
        Self::parse(&text).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))
    }

    /// The ranker compiled into this build (None, logged once, if it does not parse: search
    /// then falls back to RRF; a unit test keeps that from shipping).
    pub fn builtin() -> Option<Arc<Ranker>> {
        static BUILT: OnceLock<Option<Arc<Ranker>>> = OnceLock::new();
        BUILT
            .get_or_init(|| match Ranker::parse(BUILTIN) {
                Ok(r) => Some(Arc::new(r)),
                Err(e) => {
                    tracing::error!("the built-in ranker is unusable ({e}); using RRF");
                    None
                }
            })
            .clone()
    }

    /// Whether `kind`'s score reads the content features. They cost postings lookups and a
    /// column per segment, so a kind whose scorer ignores them (code queries since linear-v2)
    /// searches without computing them.
    pub fn reads_content(&self, kind: QueryKind) -> bool {
        self.scorer(kind).reads_content()
    }

    /// Whether `kind`'s score reads the names leg's features: a search runs that leg only then
    /// (it reads the edited file and looks up its names).
    pub fn reads_names(&self, kind: QueryKind) -> bool {
        self.scorer(kind).reads_names()
    }

    /// Whether `kind`'s score reads the members leg's features: a search runs that leg only
    /// then (it resolves the chain before the cursor and reads the target's files).
    pub fn reads_members(&self, kind: QueryKind) -> bool {
        self.scorer(kind).reads_members()
    }

    fn scorer(&self, kind: QueryKind) -> &Scorer {
        match kind {
            QueryKind::Code => &self.code,
            QueryKind::Nl => &self.nl,
        }
    }

    /// A candidate's score for `kind`: higher ranks first.
    pub fn score(&self, kind: QueryKind, features: &[f32; N_FEATURES]) -> f32 {
        self.scorer(kind).score(features)
    }

    /// The union of the legs' candidates, best first by the learned score (ties by stable key);
    /// each keeps its RRF and raw leg scores, which the thresholds read.
    pub fn rank(
        &self,
        kind: QueryKind,
        searcher: &Searcher,
        [bm25, embedding]: [&LegHits; 2],
        (names, members): (&NameHits, &MemberHits),
        content: Option<Content>,
    ) -> Vec<Fused> {
        let scorer = self.scorer(kind);
        let mut keys = super::tie::TieKeys::new(searcher);
        let mut fused: Vec<(Fused, Only)> =
            candidates(searcher, bm25, embedding, (names, members), content)
                .into_iter()
                .map(|c| {
                    let fused = Fused {
                        order: scorer.score(&c.features),
                        key: keys.key(c.address),
                        address: c.address,
                        scores: c.scores,
                    };
                    (fused, Only::of(&c.features))
                })
                .collect();
        fused.sort_by(|(a, _), (b, _)| super::fused_order(a, b));
        let (mut names_only, mut members_only) = (0, 0);
        fused
            .into_iter()
            .filter(|(_, only)| match only {
                Only::Names => {
                    names_only += 1;
                    names_only <= self.names_cap
                }
                Only::Members => {
                    members_only += 1;
                    members_only <= self.members_cap
                }
                Only::Not => true,
            })
            .map(|(f, _)| f)
            .collect()
    }
}

/// Whether a candidate was found by neither the BM25 nor the embedding leg, and then which of
/// the file's legs found it (the names leg when both did): each has its own bound.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Only {
    Not,
    Names,
    Members,
}

impl Only {
    fn of(x: &[f32; N_FEATURES]) -> Only {
        if x[BM25_IN] > 0.0 || x[EMB_IN] > 0.0 {
            Only::Not
        } else if x[N_CONTENT_END] > 0.0 {
            Only::Names
        } else if x[N_NAMES_END] > 0.0 {
            Only::Members
        } else {
            Only::Not
        }
    }
}

fn dot(w: &[f32; N_FEATURES], x: &[f32; N_FEATURES]) -> f32 {
    w.iter().zip(x).map(|(a, b)| a * b).sum()
}

/// One candidate of the union with its features.
pub struct Candidate {
    pub address: DocAddress,
    pub scores: CodeSearchScores,
    pub features: [f32; N_FEATURES],
}

/// A rank (0-based) on a log scale: 0 for the first, 1 at `n` candidates or beyond.
fn log_rank(rank: usize, n: usize) -> f32 {
    ((1 + rank) as f32).ln() / ((1 + n.max(1)) as f32).ln()
}

/// A file leg's four features (`NAME_FEATURES`, `MEMBER_FEATURES`) from its hit (rank, the
/// leg's most ranks, and the count its last feature reads: the chunks that hold the name, the
/// target's members): found, reciprocal rank, log rank (1 when not found), 1 / (1 + ln count).
fn file_leg_features(f: &mut [f32], hit: Option<(usize, usize, usize)>) {
    match hit {
        Some((rank, most, count)) => {
            f[0] = 1.0;
            f[1] = 1.0 / (rank as f32 + 1.0);
            f[2] = log_rank(rank, most);
            f[3] = 1.0 / (1.0 + (count.max(1) as f32).ln());
        }
        None => f[2] = 1.0,
    }
}

/// What the content features read: the query's words and the chunks' stored sides.
#[derive(Clone, Copy)]
pub struct Content<'a> {
    pub query: &'a content::QueryText,
    pub chunks: &'a content::ChunkSides,
}

/// The union of the legs (BM25, embedding, names, members) with every feature (the content
/// features 0 without `content`); order unspecified.
pub fn candidates(
    searcher: &Searcher,
    bm25: &LegHits,
    embedding: &LegHits,
    (names, members): (&NameHits, &MemberHits),
    content: Option<Content>,
) -> Vec<Candidate> {
    #[derive(Default)]
    struct Seen {
        bm25: Option<(usize, f32)>,
        embedding: Option<(usize, f32)>,
        names: Option<NameHit>,
        members: Option<MemberHit>,
    }
    let mut seen: HashMap<DocAddress, Seen> = HashMap::new();
    type Slot = fn(&mut Seen) -> &mut Option<(usize, f32)>;
    let legs: [(&LegHits, Slot); 2] = [(bm25, |s| &mut s.bm25), (embedding, |s| &mut s.embedding)];
    for (hits, slot) in legs {
        for (rank, (score, address)) in hits.iter().enumerate() {
            slot(seen.entry(*address).or_default()).get_or_insert((rank, *score));
        }
    }
    for hit in names {
        seen.entry(hit.address)
            .or_default()
            .names
            .get_or_insert(*hit);
    }
    for hit in members {
        seen.entry(hit.address)
            .or_default()
            .members
            .get_or_insert(*hit);
    }
    let top_bm25 = bm25.first().map_or(0.0, |(s, _)| *s);
    let top_embedding = embedding.first().map_or(0.0, |(s, _)| *s);
    let (n_bm25, n_embedding) = (bm25.len(), embedding.len());
    let mut per_segment: HashMap<u32, Vec<tantivy::DocId>> = HashMap::new();
    for address in seen.keys().filter(|_| content.is_some()) {
        per_segment
            .entry(address.segment_ord)
            .or_default()
            .push(address.doc_id);
    }
    // A segment whose postings cannot be read leaves its candidates' index features at zero.
    let index_sides: HashMap<u32, HashMap<tantivy::DocId, content::IndexSide>> = per_segment
        .into_iter()
        .filter_map(|(ord, docs)| {
            let query = content?.query;
            content::index_sides(searcher.segment_reader(ord), query, &docs)
                .ok()
                .map(|sides| (ord, sides))
        })
        .collect();
    let mut sides: HashMap<u32, Arc<content::SegmentSides>> = HashMap::new();
    let mut columns: HashMap<u32, RowColumns> = HashMap::new();
    seen.into_iter()
        .map(|(address, s)| {
            let columns = columns
                .entry(address.segment_ord)
                .or_insert_with(|| RowColumns::open(searcher.segment_reader(address.segment_ord)));
            let (in_test, defines) = columns.flags(address.doc_id);
            let rrf = |hit: Option<(usize, f32)>| {
                hit.map_or(0.0, |(rank, _)| 1.0 / (RRF_K + rank as f32 + 1.0))
            };
            let rrf = rrf(s.bm25) + rrf(s.embedding);
            let mut f = [0.0f32; N_FEATURES];
            f[0] = 1.0;
            match s.bm25 {
                Some((rank, score)) => {
                    f[1] = 1.0;
                    f[2] = if top_bm25 > 0.0 {
                        score / top_bm25
                    } else {
                        0.0
                    };
                    f[3] = 1.0 / (rank as f32 + 1.0);
                    f[4] = log_rank(rank, n_bm25);
                }
                None => f[4] = 1.0,
            }
            match s.embedding {
                Some((rank, score)) => {
                    f[5] = 1.0;
                    f[6] = score;
                    f[7] = top_embedding - score;
                    f[8] = 1.0 / (rank as f32 + 1.0);
                    f[9] = log_rank(rank, n_embedding);
                }
                None => f[9] = 1.0,
            }
            f[10] = (s.bm25.is_some() && s.embedding.is_some()) as u8 as f32;
            f[11] = in_test as u8 as f32;
            f[12] = defines as u8 as f32;
            f[13] = rrf * RRF_K;
            if let Some(Content { query, chunks }) = content {
                let index = index_sides
                    .get(&address.segment_ord)
                    .and_then(|sides| sides.get(&address.doc_id))
                    .copied()
                    .unwrap_or_default();
                let segment = sides.entry(address.segment_ord).or_insert_with(|| {
                    chunks.segment(searcher.segment_reader(address.segment_ord))
                });
                f[N_RANK_FEATURES..N_CONTENT_END].copy_from_slice(&content::features(
                    query,
                    &index,
                    segment.get(address.doc_id),
                ));
            }

            // The names leg ranks names, not chunks: a name's chunks share its rank.
            let names = s
                .names
                .map(|h| (h.rank, MAX_NAMES, h.defining_chunks as usize));
            file_leg_features(&mut f[N_CONTENT_END..N_NAMES_END], names);
            let members = s.members.map(|h| (h.rank, MAX_MEMBERS, h.members));
            file_leg_features(&mut f[N_NAMES_END..N_FEATURES], members);
            Candidate {
                address,
                scores: CodeSearchScores {
                    rrf,
                    bm25: s.bm25.map_or(0.0, |(_, v)| v),
                    embedding: s.embedding.map_or(0.0, |(_, v)| v),
                },
                features: f,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_builtin_ranker_parses_and_names_this_builds_features() {
        assert_eq!(FEATURES.len(), N_FEATURES);
        assert_eq!((FEATURES[BM25_IN], FEATURES[EMB_IN]), ("bm25_in", "emb_in"));
        assert_eq!(FEATURES[N_CONTENT_END..N_NAMES_END], NAME_FEATURES);
        assert_eq!(FEATURES[N_NAMES_END..], MEMBER_FEATURES);
        let ranker = Ranker::parse(BUILTIN).expect("assets/ranker.json");
        assert!(ranker.reads_names(QueryKind::Code) && !ranker.reads_names(QueryKind::Nl));
        assert!(ranker.reads_members(QueryKind::Code) && !ranker.reads_members(QueryKind::Nl));
        assert_eq!(ranker.names_cap, 2);
        assert_eq!(ranker.members_cap, usize::MAX);
        assert!(!ranker.version.is_empty());
        // Both kinds must prefer a chunk both legs rank first over one neither ranks well.
        for kind in [QueryKind::Code, QueryKind::Nl] {
            let mut best = [0.0; N_FEATURES];
            best[..11].copy_from_slice(&[1.0, 1.0, 1.0, 1.0, 0.0, 1.0, 0.8, 0.0, 1.0, 0.0, 1.0]);
            best[12] = 1.0;
            best[13] = 2.0 * RRF_K / (RRF_K + 1.0);
            let mut worst = [0.0; N_FEATURES];
            worst[..11].copy_from_slice(&[1.0, 1.0, 0.1, 0.025, 1.0, 0.0, 0.0, 0.0, 0.0, 1.0, 0.0]);
            worst[13] = RRF_K / (RRF_K + 40.0);
            let (b, w) = (ranker.score(kind, &best), ranker.score(kind, &worst));
            assert!(b > w, "{kind:?}: {b} against {w}");
        }
    }

    #[test]
    fn the_builtin_ranker_prefers_a_candidate_whose_words_and_path_match_a_question() {
        let ranker = Ranker::parse(BUILTIN).unwrap();
        // Two candidates the legs rank alike (BM25's third, no embedding hit).
        let mut ranks = [0.0; N_FEATURES];
        ranks[..5].copy_from_slice(&[1.0, 1.0, 0.8, 1.0 / 3.0, log_rank(2, 40)]);
        ranks[9] = 1.0;
        ranks[12] = 1.0;
        ranks[13] = RRF_K / (RRF_K + 3.0);
        let cases = [
            (QueryKind::Nl, "HTML escape a string of code."),
            (
                QueryKind::Code,
                "from . import util\n\ndef render(text):\n    return util.",
            ),
        ];
        // A candidate: the same ranks, then its content features.
        let candidate = |query: &content::QueryText, in_words, in_symbols, body, path| {
            let index = content::IndexSide {
                in_words,
                in_symbols,
                symbol_words: 3,
                words: 30,
            };
            let side = tabby_common::index::chunk_side::ChunkSide::new(body, path);
            let mut x = ranks;
            x[N_RANK_FEATURES..N_CONTENT_END]
                .copy_from_slice(&content::features(query, &index, &side));
            x
        };
        for (kind, query) in cases {
            let query = content::QueryText::new(query);
            let matching = candidate(
                &query,
                3,
                2,
                "def code_escape(text):\n    return text.replace('&', '&amp;')",
                "markdown/util.py",
            );
            let other = candidate(
                &query,
                1,
                0,
                "    for item in items:\n        total += item.size",
                "markdown/blockparser.py",
            );
            let score = |x| ranker.score(kind, x);
            match kind {
                QueryKind::Nl => assert!(score(&matching) > score(&other)),
                // Code queries keep linear-v1's order: the end-to-end completion eval scored
                // its prompts better (README, "Content features in the ranker").
                QueryKind::Code => assert_eq!(score(&matching), score(&other)),
            }
        }
    }

    #[test]
    fn ranker_files_with_other_features_or_bad_numbers_are_refused() {
        let other = r#"{"version":"x","features":["bias"],"weights":{"code":[1],"nl":[1]}}"#;
        let e = Ranker::parse(other).unwrap_err().to_string();
        assert!(e.contains("trained on the features"), "{e}");
        let names = serde_json::to_string(&FEATURES[..]).unwrap();
        let short =
            format!(r#"{{"version":"x","features":{names},"weights":{{"code":[1],"nl":[1]}}}}"#);
        let e = Ranker::parse(&short).unwrap_err().to_string();
        assert!(e.contains(&format!("not {N_FEATURES} numbers")), "{e}");
        let nan = format!(
            r#"{{"version":"x","features":{names},"weights":{{"code":{z},"nl":[1e999{rest}]}}}}"#,
            z = serde_json::to_string(&[0.0; N_FEATURES][..]).unwrap(),
            rest = ",0".repeat(N_FEATURES - 1)
        );
        assert!(Ranker::parse(&nan).is_err());
        assert!(Ranker::parse("not json").is_err());
    }

    /// A file written before the members leg (linear-v3's 31 features) still loads: the
    /// members' features weigh nothing, so a search with it runs no members leg. A list cut
    /// anywhere but at a leg's end is refused.
    #[test]
    fn ranker_files_written_before_a_leg_weigh_its_features_zero() {
        let before = serde_json::to_string(&FEATURES[..N_NAMES_END]).unwrap();
        let mut w = vec![0.0f32; N_NAMES_END];
        w[N_CONTENT_END] = 2.0;
        let w = serde_json::to_string(&w).unwrap();
        let text = format!(
            r#"{{"version":"old","features":{before},"weights":{{"code":{w},"nl":{w}}},"names_cap":1}}"#
        );
        let ranker = Ranker::parse(&text).unwrap();
        assert!(ranker.reads_names(QueryKind::Code));
        assert!(!ranker.reads_members(QueryKind::Code));
        assert_eq!((ranker.names_cap, ranker.members_cap), (1, usize::MAX));
        let mut x = [1.0; N_FEATURES];
        assert_eq!(ranker.score(QueryKind::Code, &x), 2.0);
        x[N_CONTENT_END] = 0.0;
        assert_eq!(ranker.score(QueryKind::Code, &x), 0.0);
        // Weights for the names the file gives, no more.
        let long = serde_json::to_string(&[0.0; N_FEATURES][..]).unwrap();
        let text = format!(
            r#"{{"version":"old","features":{before},"weights":{{"code":{long},"nl":{long}}}}}"#
        );
        let e = Ranker::parse(&text).unwrap_err().to_string();
        assert!(e.contains(&format!("not {N_NAMES_END} numbers")), "{e}");
        let cut = serde_json::to_string(&FEATURES[..N_NAMES_END - 1]).unwrap();
        let w = serde_json::to_string(&[0.0; N_NAMES_END - 1]).unwrap();
        let text =
            format!(r#"{{"version":"cut","features":{cut},"weights":{{"code":{w},"nl":{w}}}}}"#);
        let e = Ranker::parse(&text).unwrap_err().to_string();
        assert!(e.contains("trained on the features"), "{e}");
    }

    /// Candidates only the names leg found and those only the members leg found have their
    /// own bounds; one that BM25 or the embedding also found is bound by neither.
    #[test]
    fn only_the_file_legs_candidates_are_bounded_each_by_its_own_cap() {
        let mut x = [0.0; N_FEATURES];
        assert!(Only::of(&x) == Only::Not);
        x[N_NAMES_END] = 1.0;
        assert!(Only::of(&x) == Only::Members);
        x[N_CONTENT_END] = 1.0;
        assert!(Only::of(&x) == Only::Names);
        x[BM25_IN] = 1.0;
        assert!(Only::of(&x) == Only::Not);
        x[BM25_IN] = 0.0;
        x[EMB_IN] = 1.0;
        assert!(Only::of(&x) == Only::Not);
    }

    /// A ranker file with `code` and `nl` given as the JSON values `code` and `nl`.
    fn file_with(code: &str, nl: &str) -> String {
        let names = serde_json::to_string(&FEATURES[..]).unwrap();
        format!(r#"{{"version":"t","features":{names},{code},{nl}}}"#)
    }

    #[test]
    fn trees_score_by_walking_each_tree_and_summing_its_leaves() {
        let linear = serde_json::to_string(&[0.0; N_FEATURES][..]).unwrap();
        // Tree 1 splits on bm25_rr (3) then on q_cov (14); tree 2 is a constant.
        let text = file_with(
            &format!(r#""weights":{{"code":{linear}}}"#),
            r#""trees":{"nl":[
                {"nodes":[[3,0.5,1,-3],[14,0.25,-1,-2]],"leaves":[-1.0,0.5,2.0]},
                {"nodes":[],"leaves":[0.25]}]}"#,
        );
        let ranker = Ranker::parse(&text).unwrap();
        let at = |bm25_rr: f32, q_cov: f32| {
            let mut x = [0.0; N_FEATURES];
            x[3] = bm25_rr;
            x[14] = q_cov;
            ranker.score(QueryKind::Nl, &x)
        };
        assert_eq!(at(0.9, 0.0), 2.25);
        assert_eq!(at(0.5, 0.25), -0.75); // at the threshold: left, twice
        assert_eq!(at(0.1, 0.3), 0.75);
        assert!(ranker.reads_content(QueryKind::Nl));
        assert!(!ranker.reads_content(QueryKind::Code));
        assert_eq!(ranker.score(QueryKind::Code, &[1.0; N_FEATURES]), 0.0);
    }

    #[test]
    fn tree_files_that_could_loop_or_read_out_of_range_are_refused() {
        let linear = serde_json::to_string(&[0.0; N_FEATURES][..]).unwrap();
        let code = format!(r#""weights":{{"code":{linear}}}"#);
        let nl = |tree: &str| format!(r#""trees":{{"nl":[{tree}]}}"#);
        let cases = [
            // a child before its parent: a walk that never ends
            (
                r#"{"nodes":[[0,0.5,1,-1],[0,0.5,0,-1]],"leaves":[1.0]}"#,
                "out of order",
            ),
            // itself
            (r#"{"nodes":[[0,0.5,0,-1]],"leaves":[1.0]}"#, "out of order"),
            (
                r#"{"nodes":[[0,0.5,2,-1],[0,0.5,-1,-1]],"leaves":[1.0]}"#,
                "out of order",
            ),
            (
                r#"{"nodes":[[0,0.5,-1,-3]],"leaves":[1.0,2.0]}"#,
                "out of order",
            ),
            (
                r#"{"nodes":[[0,0.5,-1,-9223372036854775808]],"leaves":[1.0]}"#,
                "out of order",
            ),
            (
                r#"{"nodes":[[99,0.5,-1,-2]],"leaves":[1.0,2.0]}"#,
                "feature 99",
            ),
            (r#"{"nodes":[],"leaves":[]}"#, "missing"),
            (r#"{"nodes":[],"leaves":[1e300]}"#, "not within"),
            (r#"{"nodes":[],"leaves":[1.0,2.0]}"#, "several leaves"),
        ];
        for (tree, why) in cases {
            let e = Ranker::parse(&file_with(&code, &nl(tree)))
                .unwrap_err()
                .to_string();
            assert!(e.contains("nl tree 0") && e.contains(why), "{tree}: {e}");
        }
        // JSON has no infinities: serde refuses numbers beyond f64 (checked again after it).
        for tree in [
            r#"{"nodes":[[0,1e999,-1,-2]],"leaves":[1.0,2.0]}"#,
            r#"{"nodes":[[0,0.5,-1,-2]],"leaves":[1.0,-1e999]}"#,
        ] {
            assert!(Ranker::parse(&file_with(&code, &nl(tree))).is_err());
        }
        let e = Ranker::parse(&file_with(&code, r#""trees":{"nl":[]}"#)).unwrap_err();
        assert!(e.to_string().contains("not 1 to"), "{e}");
        let both = file_with(
            &format!(r#""weights":{{"code":{linear},"nl":{linear}}}"#),
            r#""trees":{"nl":[{"nodes":[],"leaves":[1.0]}]}"#,
        );
        let e = Ranker::parse(&both).unwrap_err().to_string();
        assert!(e.contains("both weights and trees"), "{e}");
        let neither = file_with(&code, r#""trees":{}"#);
        let e = Ranker::parse(&neither).unwrap_err().to_string();
        assert!(e.contains("no weights or trees for nl"), "{e}");
        let many = vec![r#"{"nodes":[],"leaves":[1.0]}"#; MAX_TREES + 1].join(",");
        let e = Ranker::parse(&file_with(&code, &format!(r#""trees":{{"nl":[{many}]}}"#)));
        assert!(e.unwrap_err().to_string().contains("not 1 to"));
    }

    #[test]
    fn query_kinds() {
        assert_eq!(
            QueryKind::of("how are tokens refreshed", None),
            QueryKind::Nl
        );
        assert_eq!(QueryKind::of("question?\n", None), QueryKind::Nl);
        assert_eq!(
            QueryKind::of("def f():\n    return g(", None),
            QueryKind::Code
        );
        assert_eq!(QueryKind::of("x = g(", Some("a.py")), QueryKind::Code);
    }
}
