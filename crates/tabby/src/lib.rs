//! The tabby server as a library: the binary (`main.rs`) parses arguments and calls into here;
//! benchmarks and tests build the same application in-process.

pub mod cli;
pub mod download;
pub mod eval;
pub mod indexing;
pub mod mcp;
pub mod routes;
pub mod serve;
pub mod services;
