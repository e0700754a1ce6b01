"""Repository agents: code that runs between the repository and the loader, as Triton's repository
agents do (`model_repository_agents` in config.pbtxt). `base` is the interface an agent implements,
`registry` finds an agent by name (built in, an installed entry point, or a --repoagent-directory),
`chain` runs a model's agents through its load and unload, and `checksum` and `dragonfly` are the two
agents tcli ships."""
