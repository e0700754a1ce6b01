"""Transport-neutral core types: datatypes, errors, tensors, requests and responses."""
