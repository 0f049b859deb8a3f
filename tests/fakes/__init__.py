"""Test doubles shared by the test suites (fake servers and the like)."""

from tests.fakes.openai_server import FakeOpenAIServer, FakeReply, FakeToolCall, RecordedRequest

__all__ = ["FakeOpenAIServer", "FakeReply", "FakeToolCall", "RecordedRequest"]
