"""Alert: envelope growth detection, rules, webhook delivery."""
