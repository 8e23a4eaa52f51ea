"""Work a step places on a Ray cluster: joining it, scoring fork-servers per node, episodes on N engines."""
