//! lockkit backend crate; filled by its own issue.
