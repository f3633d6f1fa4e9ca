"""Programs the tracer is held to the sys.setprofile oracle on. Each has run()."""
