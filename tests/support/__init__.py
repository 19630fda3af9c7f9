"""Test helpers shared by several test modules (servers, fakes)."""
