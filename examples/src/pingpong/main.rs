//! Raw verbs ping-pong (being built).
fn main() {}
