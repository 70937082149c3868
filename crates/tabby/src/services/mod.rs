//! Services: the product's behaviour, independent of HTTP.

pub mod chat;
pub mod code;
pub mod completion;
pub mod context;
pub mod doc;
pub mod event;
pub mod health;
pub mod model;
