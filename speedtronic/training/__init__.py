"""The runtime that produces events: the reference ``Trainer``, the DiLoCo ``OuterLoop``, the config
schema and ``build_runtime``, and ``torchrun`` launching. Importing this package imports no torch;
``training.trainer`` and ``training.outer`` do (``speedtronic[torch]``)."""
