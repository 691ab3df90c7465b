"""The HTTP surface: the FastAPI gateway, MCP, OpenAPI, auth, request limits and tool inputs."""
