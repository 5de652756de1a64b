//! Services that turns and doors use and that know nothing of turns: knowledge collections
//! (chunked, searched by full text and, with an embeddings endpoint, by meaning), asset bytes
//! (a directory or an S3 bucket) and the `read_artifact` tool over them, and the library of
//! saved workflows.

pub mod assets;
pub mod collections;
pub mod embeddings;
pub mod knowledge;
pub mod read_artifact;
pub mod saved_workflows;
pub mod workflows;
