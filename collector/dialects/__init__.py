"""Recognise: which spans are tool and LLM calls in each instrumentation's conventions, and what they carry."""
