"""Sample traffic for `ragmon demo`: a fictional product's support knowledge base and rankings."""
