//! Knowledge tools over a [`KnowledgeBase`] (the server's collections): `list_collections`,
//! `search_collections`, `query_collection` (read: the user's collections and shared ones),
//! and long-term memory, `remember` (write) and `recall` (read), for turns that enable it.
//! Hits carry document, title, chunk and score, so the model can cite.

use std::sync::Arc;

use async_trait::async_trait;
use serde::Serialize;
use serde_json::{json, Value};
use weft_core::{Tool, ToolContext, ToolError};
use weft_protocol::{PolicyClass, ToolCategory};

use crate::args::required_text;

/// A collection as the model sees it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CollectionInfo {
    pub name: String,
    pub description: String,
    pub owner: String,
    pub shared: bool,
    pub documents: usize,
}

/// One chunk found.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Hit {
    pub collection: String,
    pub document: String,
    pub title: String,
    pub chunk: String,
    pub score: f64,
}

/// Where collections and memories live.
#[async_trait]
pub trait KnowledgeBase: Send + Sync {
    /// The user's collections and those shared with everyone (memory not included).
    async fn collections(&self, user: &str) -> Result<Vec<CollectionInfo>, String>;
    /// The best `k` chunks for `query` in one collection (`Some(name)`) or in all of them.
    async fn query(
        &self,
        user: &str,
        collection: Option<&str>,
        query: &str,
        k: usize,
    ) -> Result<Vec<Hit>, String>;
    /// Keep a fact in the user's long-term memory.
    async fn remember(&self, user: &str, fact: &str) -> Result<(), String>;
    /// The facts of the user's memory that best match `query`.
    async fn recall(&self, user: &str, query: &str, k: usize) -> Result<Vec<Hit>, String>;
}

/// Hits a query returns when the model does not say.
const DEFAULT_K: usize = 5;
const MOST_K: usize = 20;

/// The three collection tools.
pub fn collection_tools(knowledge: &Arc<dyn KnowledgeBase>) -> Vec<Arc<dyn Tool>> {
    vec![
        Arc::new(ListCollections(knowledge.clone())),
        Arc::new(SearchCollections(knowledge.clone())),
        Arc::new(QueryCollection(knowledge.clone())),
    ]
}

/// The names of the memory tools.
pub const MEMORY_TOOLS: [&str; 2] = [REMEMBER, RECALL];
const REMEMBER: &str = "remember";
const RECALL: &str = "recall";

/// `remember` and `recall`, for turns with long-term memory.
pub fn memory_tools(knowledge: &Arc<dyn KnowledgeBase>) -> Vec<Arc<dyn Tool>> {
    vec![
        Arc::new(Remember(knowledge.clone())),
        Arc::new(Recall(knowledge.clone())),
    ]
}

fn k_of(args: &Value) -> usize {
    args.get("k")
        .and_then(Value::as_u64)
        .map_or(DEFAULT_K, |k| usize::try_from(k).unwrap_or(MOST_K))
        .clamp(1, MOST_K)
}

fn hits(hits: &[Hit]) -> String {
    json!({ "hits": hits }).to_string()
}

pub struct ListCollections(Arc<dyn KnowledgeBase>);
pub struct SearchCollections(Arc<dyn KnowledgeBase>);
pub struct QueryCollection(Arc<dyn KnowledgeBase>);
pub struct Remember(Arc<dyn KnowledgeBase>);
pub struct Recall(Arc<dyn KnowledgeBase>);

#[async_trait]
impl Tool for ListCollections {
    weft_core::tool_meta! {
        name: "list_collections",
        description: "List the knowledge collections you can search: yours and shared ones, with descriptions.",
        class: Knowledge,
        category: Read,
        parameters: json!({"type": "object", "properties": {}}),
    }
    async fn call(&self, _args: Value, ctx: &ToolContext) -> Result<String, ToolError> {
        let list = self
            .0
            .collections(&ctx.user_id)
            .await
            .map_err(ToolError::model)?;
        Ok(json!({ "collections": list }).to_string())
    }
}

#[async_trait]
impl Tool for SearchCollections {
    weft_core::tool_meta! {
        name: "search_collections",
        description: "Search every knowledge collection you can read; returns the best passages with their \
    collection, document, title and score.",
        class: Knowledge,
        category: Read,
        parameters: json!({"type": "object", "properties": {
            "query": {"type": "string"},
            "k": {"type": "integer", "minimum": 1, "maximum": MOST_K}
        }, "required": ["query"]}),
    }
    async fn call(&self, args: Value, ctx: &ToolContext) -> Result<String, ToolError> {
        let query = required_text(&args, "query")?;
        let found = self
            .0
            .query(&ctx.user_id, None, query, k_of(&args))
            .await
            .map_err(ToolError::model)?;
        Ok(hits(&found))
    }
}

#[async_trait]
impl Tool for QueryCollection {
    weft_core::tool_meta! {
        name: "query_collection",
        description: "Find the passages of one knowledge collection that best answer a question; cite them \
    by document and title.",
        class: Knowledge,
        category: Read,
        parameters: json!({"type": "object", "properties": {
            "collection": {"type": "string", "description": "Its name (see list_collections)."},
            "query": {"type": "string"},
            "k": {"type": "integer", "minimum": 1, "maximum": MOST_K}
        }, "required": ["collection", "query"]}),
    }
    async fn call(&self, args: Value, ctx: &ToolContext) -> Result<String, ToolError> {
        let collection = required_text(&args, "collection")?;
        let query = required_text(&args, "query")?;
        let found = self
            .0
            .query(&ctx.user_id, Some(collection), query, k_of(&args))
            .await
            .map_err(ToolError::model)?;
        Ok(hits(&found))
    }
}

#[async_trait]
impl Tool for Remember {
    fn name(&self) -> &str {
        REMEMBER
    }
    fn description(&self) -> &str {
        "Keep a fact about the user or their work in long-term memory, for later conversations."
    }
    fn parameters(&self) -> Value {
        json!({"type": "object", "properties": {
            "fact": {"type": "string", "description": "One self-contained fact."}
        }, "required": ["fact"]})
    }
    fn policy_class(&self) -> PolicyClass {
        PolicyClass::Knowledge
    }
    fn category(&self) -> ToolCategory {
        ToolCategory::Write
    }
    async fn call(&self, args: Value, ctx: &ToolContext) -> Result<String, ToolError> {
        let fact = required_text(&args, "fact")?;
        self.0
            .remember(&ctx.user_id, fact)
            .await
            .map_err(ToolError::model)?;
        Ok("remembered".to_owned())
    }
}

#[async_trait]
impl Tool for Recall {
    weft_core::tool_meta! {
        name: RECALL,
        description: "Look up facts from long-term memory that match a query.",
        class: Knowledge,
        category: Read,
        parameters: json!({"type": "object", "properties": {
            "query": {"type": "string"},
            "k": {"type": "integer", "minimum": 1, "maximum": MOST_K}
        }, "required": ["query"]}),
    }
    async fn call(&self, args: Value, ctx: &ToolContext) -> Result<String, ToolError> {
        let query = required_text(&args, "query")?;
        let found = self
            .0
            .recall(&ctx.user_id, query, k_of(&args))
            .await
            .map_err(ToolError::model)?;
        let facts: Vec<&str> = found.iter().map(|h| h.chunk.as_str()).collect();
        Ok(json!({ "facts": facts }).to_string())
    }
}
