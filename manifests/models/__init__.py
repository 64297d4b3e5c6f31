"""Example model factories used by the manifests in this folder."""
