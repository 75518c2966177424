//! lockkit cli; filled by its own issue.
