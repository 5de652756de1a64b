//! Graph validation: every type exists, node ids are unique, static inputs name real ports
//! and fit their schemas, edges join existing ports of compatible schemas (one edge per
//! input), the graph is acyclic, and every required input is set or connected. A valid graph
//! becomes a [`Plan`] the executor runs; an invalid one gives every error, each naming the
//! node and port.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use serde::Serialize;
use serde_json::{Map, Value};

use crate::graph::{Edge, Graph};
use crate::node::NodeType;
use crate::registry::NodeRegistry;
use crate::run::RunLimits;

/// One problem with a graph (`invalid_graph`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct GraphError {
    /// The node at fault (empty for the graph as a whole).
    pub node: String,
    /// The port at fault, if one is.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub port: Option<String>,
    pub message: String,
}

impl std::fmt::Display for GraphError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match (&self.node, &self.port) {
            (node, _) if node.is_empty() => write!(f, "{}", self.message),
            (node, Some(port)) => write!(f, "node `{node}` port `{port}`: {}", self.message),
            (node, None) => write!(f, "node `{node}`: {}", self.message),
        }
    }
}

/// A node ready to run: its type, static inputs, and where its other inputs come from.
pub struct PlanNode {
    pub id: String,
    pub node_type: Arc<dyn NodeType>,
    pub static_inputs: Map<String, Value>,
    /// `(upstream node index, its output port, this node's input port)`.
    pub incoming: Vec<(usize, String, String)>,
    /// Indices of the nodes that take an input from this one (each once).
    pub dependants: Vec<usize>,
    /// How many distinct nodes this one waits for.
    pub upstream: usize,
    /// Input ports this node needs before it can run.
    pub required: Vec<String>,
}

/// A validated graph.
pub struct Plan {
    pub nodes: Vec<PlanNode>,
    /// How deep the graphs given to its nodes (`list.map`'s) nest: 0 when there are none.
    pub nesting: u32,
}

fn error(node: &str, port: Option<&str>, message: impl Into<String>) -> GraphError {
    GraphError {
        node: node.to_owned(),
        port: port.map(str::to_owned),
        message: message.into(),
    }
}

/// The ports a schema declares, and whether it takes others.
fn ports(schema: &Value) -> (Option<&Map<String, Value>>, bool) {
    let open = schema
        .get("additionalProperties")
        .is_some_and(|a| a == &Value::Bool(true) || a.is_object());
    (schema.get("properties").and_then(Value::as_object), open)
}

fn port_schema<'a>(schema: &'a Value, port: &str) -> Option<&'a Value> {
    match ports(schema) {
        (Some(props), _) if props.contains_key(port) => props.get(port),
        (_, true) => Some(&Value::Null),
        _ => None,
    }
}

/// The JSON types a port schema allows (empty: any).
fn types_of(schema: &Value) -> Vec<&str> {
    match schema.get("type") {
        Some(Value::String(t)) => vec![t.as_str()],
        Some(Value::Array(ts)) => ts.iter().filter_map(Value::as_str).collect(),
        _ => Vec::new(),
    }
}

/// Whether what an output produces can feed an input.
fn compatible(output: &Value, input: &Value) -> bool {
    let (from, to) = (types_of(output), types_of(input));
    if from.is_empty() || to.is_empty() {
        return true;
    }
    from.iter()
        .all(|f| to.contains(f) || (*f == "integer" && to.contains(&"number")))
}

pub fn validate(graph: &Graph, registry: &NodeRegistry) -> Result<Plan, Vec<GraphError>> {
    let mut errors = Vec::new();
    if graph.nodes.is_empty() {
        errors.push(error("", None, "the graph has no nodes"));
    }
    let (index, types, nesting) = node_types(graph, registry, &mut errors);
    let (incoming, connected) = edges(graph, &index, &types, &mut errors);
    let required_of = required_inputs(graph, &types, &connected, &mut errors);
    if let Some(node) = cycle(&incoming) {
        errors.push(error(&graph.nodes[node].id, None, "is part of a cycle"));
    }
    if !errors.is_empty() {
        return Err(errors);
    }
    Ok(plan(graph, types, incoming, required_of, nesting))
}

/// A node's type, when it is known.
type NodeTypeOf = Option<Arc<dyn NodeType>>;

/// An edge into a node: `(from, output, input)`.
type Incoming = (usize, String, String);

/// Each node's type (ids unique, types known, static inputs fitting), where each id is, and
/// how deep the graphs given to nodes nest.
fn node_types<'g>(
    graph: &'g Graph,
    registry: &NodeRegistry,
    errors: &mut Vec<GraphError>,
) -> (HashMap<&'g str, usize>, Vec<NodeTypeOf>, u32) {
    let mut index: HashMap<&str, usize> = HashMap::new();
    let mut nesting = 0;
    let mut types: Vec<NodeTypeOf> = Vec::with_capacity(graph.nodes.len());
    for (i, node) in graph.nodes.iter().enumerate() {
        if node.id.is_empty() || index.insert(node.id.as_str(), i).is_some() {
            errors.push(error(
                &node.id,
                None,
                "node ids must be unique and non-empty",
            ));
        }
        let node_type = registry.get(&node.node_type).cloned();
        match &node_type {
            None => errors.push(error(
                &node.id,
                None,
                format!(
                    "unknown node type `{}`; see GET /node-types",
                    node.node_type
                ),
            )),
            Some(t) => nesting = nesting.max(static_inputs(node, t.as_ref(), registry, errors)),
        }
        types.push(node_type);
    }
    (index, types, nesting)
}

/// Each node's incoming edges `(from, output, input)`, and every connected input: edges join
/// existing ports of compatible schemas, one edge per input, no node feeding itself.
fn edges<'g>(
    graph: &'g Graph,
    index: &HashMap<&str, usize>,
    types: &[Option<Arc<dyn NodeType>>],
    errors: &mut Vec<GraphError>,
) -> (Vec<Vec<Incoming>>, HashSet<(usize, &'g str)>) {
    let mut incoming: Vec<Vec<Incoming>> = vec![Vec::new(); graph.nodes.len()];
    let mut connected: HashSet<(usize, &str)> = HashSet::new();
    for edge in &graph.edges {
        let (Some(&from), Some(&to)) = (index.get(edge.from.as_str()), index.get(edge.to.as_str()))
        else {
            let missing = if index.contains_key(edge.from.as_str()) {
                &edge.to
            } else {
                &edge.from
            };
            errors.push(error(
                missing,
                None,
                format!(
                    "an edge {} → {} names a node that does not exist",
                    edge.from, edge.to
                ),
            ));
            continue;
        };
        let (Some(from_type), Some(to_type)) = (&types[from], &types[to]) else {
            continue;
        };
        if let Err(e) = edge_fits(edge, from_type.as_ref(), to_type.as_ref()) {
            errors.push(e);
            continue;
        }
        if !connected.insert((to, edge.input.as_str())) {
            errors.push(error(
                &edge.to,
                Some(&edge.input),
                "more than one edge feeds this input",
            ));
            continue;
        }
        if from == to {
            errors.push(error(
                &edge.to,
                Some(&edge.input),
                "a node cannot feed itself (cycle)",
            ));
            continue;
        }
        incoming[to].push((from, edge.output.clone(), edge.input.clone()));
    }
    (incoming, connected)
}

/// The edge's ports exist and what the output gives fits the input.
fn edge_fits(edge: &Edge, from: &dyn NodeType, to: &dyn NodeType) -> Result<(), GraphError> {
    let Some(out_schema) = port_schema(&from.outputs(), &edge.output).cloned() else {
        return Err(error(&edge.from, Some(&edge.output), "no such output port"));
    };
    let Some(in_schema) = port_schema(&to.inputs(), &edge.input).cloned() else {
        return Err(error(&edge.to, Some(&edge.input), "no such input port"));
    };
    if !compatible(&out_schema, &in_schema) {
        return Err(error(
            &edge.to,
            Some(&edge.input),
            format!(
                "takes {:?} but `{}.{}` gives {:?}",
                types_of(&in_schema),
                edge.from,
                edge.output,
                types_of(&out_schema)
            ),
        ));
    }
    Ok(())
}

/// Each node's required inputs; each must be set or connected.
fn required_inputs(
    graph: &Graph,
    types: &[Option<Arc<dyn NodeType>>],
    connected: &HashSet<(usize, &str)>,
    errors: &mut Vec<GraphError>,
) -> Vec<Vec<String>> {
    let mut required_of: Vec<Vec<String>> = vec![Vec::new(); graph.nodes.len()];
    for (i, node) in graph.nodes.iter().enumerate() {
        let Some(t) = &types[i] else { continue };
        let required: Vec<String> = t
            .inputs()
            .get("required")
            .and_then(Value::as_array)
            .map(|r| {
                r.iter()
                    .filter_map(Value::as_str)
                    .map(str::to_owned)
                    .collect()
            })
            .unwrap_or_default();
        for port in &required {
            if !node.inputs.contains_key(port) && !connected.contains(&(i, port.as_str())) {
                errors.push(error(
                    &node.id,
                    Some(port),
                    "required input is neither set nor connected",
                ));
            }
        }
        required_of[i] = required;
    }
    required_of
}

/// The plan of a valid graph: each node with its dependants and how many it waits for.
fn plan(
    graph: &Graph,
    types: Vec<Option<Arc<dyn NodeType>>>,
    incoming: Vec<Vec<(usize, String, String)>>,
    required_of: Vec<Vec<String>>,
    nesting: u32,
) -> Plan {
    let mut dependants: Vec<Vec<usize>> = vec![Vec::new(); graph.nodes.len()];
    let mut upstream = vec![0usize; graph.nodes.len()];
    for (to, edges) in incoming.iter().enumerate() {
        let mut seen = HashSet::new();
        for (from, _, _) in edges {
            if seen.insert(*from) {
                dependants[*from].push(to);
                upstream[to] += 1;
            }
        }
    }
    let nodes = graph
        .nodes
        .iter()
        .zip(types)
        .zip(incoming)
        .zip(dependants)
        .zip(upstream)
        .zip(required_of)
        .filter_map(
            |(((((node, t), incoming), dependants), upstream), required)| {
                Some(PlanNode {
                    id: node.id.clone(),
                    node_type: t?,
                    static_inputs: node.inputs.clone(),
                    incoming,
                    dependants,
                    upstream,
                    required,
                })
            },
        )
        .collect();
    Plan { nodes, nesting }
}

/// Static inputs must name ports and fit their schemas; a graph a node runs (`list.map`'s)
/// must be valid. How deep the graphs given here nest.
fn static_inputs(
    node: &crate::graph::Node,
    node_type: &dyn NodeType,
    registry: &NodeRegistry,
    errors: &mut Vec<GraphError>,
) -> u32 {
    let schema = node_type.inputs();
    let mut nesting = 0;
    for (port, value) in &node.inputs {
        let Some(port_schema) = port_schema(&schema, port) else {
            errors.push(error(&node.id, Some(port), "no such input port"));
            continue;
        };
        if port_schema.is_object() {
            if let Ok(validator) = jsonschema::validator_for(port_schema) {
                if let Some(e) = validator.iter_errors(value).next() {
                    errors.push(error(
                        &node.id,
                        Some(port),
                        format!("value does not fit: {e}"),
                    ));
                }
            }
        }
        if node_type.graph_port() != Some(port.as_str()) {
            continue;
        }
        match serde_json::from_value::<Graph>(value.clone()) {
            Ok(inner) => match validate(&inner, registry) {
                Ok(plan) => nesting = nesting.max(plan.nesting + 1),
                Err(inner_errors) => errors.extend(inner_errors.into_iter().map(|e| GraphError {
                    node: format!("{}/{}", node.id, e.node),
                    ..e
                })),
            },
            Err(e) => errors.push(error(&node.id, Some(port), format!("not a graph: {e}"))),
        }
    }
    nesting
}

/// [`validate`], and the graph within `limits`: its nodes (`max_node_runs`) and its nesting
/// (`max_map_depth`).
pub fn validate_within(
    graph: &Graph,
    registry: &NodeRegistry,
    limits: &RunLimits,
) -> Result<Plan, Vec<GraphError>> {
    // A graph that could never run whole is refused before it is looked at node by node.
    if graph.nodes.len() as u64 > limits.max_node_runs {
        return Err(vec![error(
            "",
            None,
            format!(
                "the graph has {} nodes; this server runs at most {} nodes a run \
                 ([workflow] max_node_runs)",
                graph.nodes.len(),
                limits.max_node_runs
            ),
        )]);
    }
    let plan = validate(graph, registry)?;
    if plan.nesting > limits.max_map_depth {
        return Err(vec![error(
            "",
            None,
            format!(
                "list.map nested {} deep; this server allows {} ([workflow] max_map_depth)",
                plan.nesting, limits.max_map_depth
            ),
        )]);
    }
    Ok(plan)
}

/// A node on a cycle, if there is one (Kahn's algorithm leaves it unvisited).
fn cycle(incoming: &[Vec<(usize, String, String)>]) -> Option<usize> {
    let n = incoming.len();
    let mut indegree = vec![0usize; n];
    let mut out: Vec<Vec<usize>> = vec![Vec::new(); n];
    for (to, edges) in incoming.iter().enumerate() {
        for (from, _, _) in edges {
            indegree[to] += 1;
            out[*from].push(to);
        }
    }
    let mut ready: Vec<usize> = (0..n).filter(|&i| indegree[i] == 0).collect();
    let mut visited = 0;
    while let Some(i) = ready.pop() {
        visited += 1;
        for &to in &out[i] {
            indegree[to] -= 1;
            if indegree[to] == 0 {
                ready.push(to);
            }
        }
    }
    (visited < n).then(|| (0..n).find(|&i| indegree[i] > 0).unwrap_or(0))
}
