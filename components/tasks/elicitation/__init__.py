"""The preference-elicitation task: its task class, domains, generator of task records and config section."""
