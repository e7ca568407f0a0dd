"""The in-process agent: what runs inside the user's training process (profile and run).

Standard library and torch only (checked by tests/test_agent.py): the agent may run in the user's own
interpreter, whose environment has their torch and none of trainwise's dependencies. Its parts are small
subscribers fed typed events (trainwise.agent.events), each testable with a synthetic event stream.
The step tracer (trainwise.agent.trace) is the one part that needs trainwise's dependencies: its
entry point builds core's WorkloadCharacterisation (pydantic), imported only when a step is traced.
"""
