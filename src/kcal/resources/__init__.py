"""Package data: dataset checksums and the paper's published numbers."""
