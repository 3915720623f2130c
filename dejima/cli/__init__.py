"""Console scripts. Each main(argv) is thin: parse, call, map errors to exit codes."""
