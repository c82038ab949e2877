//! The sample graph of the service's tests (`samples/resnet_block.train.json`): one loader,
//! shared by the black-box tests (`tests/common`) and the unit tests of `src/service`
//! (included there with `#[path]`).

/// The sample graph's text.
pub fn sample_text() -> String {
    memplan::graph::SAMPLE_JSON.to_string()
}

/// The sample graph, parsed by the library.
pub fn sample_graph() -> memplan::Graph {
    memplan::Graph::parse(&sample_text()).unwrap()
}
