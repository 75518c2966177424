//! lockkit bench; filled by its own issue.
