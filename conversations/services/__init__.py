"""The only writers of conversation state: one transaction per function, publishing after commit."""
