"""The sample traces ``toolmeter demo`` loads (shipped in the wheel; see README.md here)."""
