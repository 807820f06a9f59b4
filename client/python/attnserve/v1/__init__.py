"""Modules generated from proto/attnserve/v1/ by client/python/generate_stubs.sh (do not
edit them; tests/python/stubs_test.sh holds them to the .proto files): attnserve_pb2 (the
messages, e.g. attnserve_pb2.Session), model_config_pb2 and attnserve_pb2_grpc (the raw
stub). They live at the import path protoc gives them, attnserve.v1, which is why their
absolute imports (`from attnserve.v1 import model_config_pb2`) resolve in this package."""
