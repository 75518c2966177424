//! The error type of a benchmark run.

/// Errors of a benchmark run.
pub type BenchError = Box<dyn std::error::Error + Send + Sync>;
