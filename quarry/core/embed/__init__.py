"""Embedders: sentence-transformers models, ONNX query encoders, the factory that picks one."""
