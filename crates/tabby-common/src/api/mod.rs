//! Types shared between the server's services and the HTTP layer.

pub mod code;
pub mod doc;
pub mod event;
