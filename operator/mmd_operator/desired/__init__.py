"""Pure builders of everything the operator creates, and the decision of what should exist.

`state.desired_state` decides for one resource; the other modules build one kind of child each. Kept
free of imports here, so the label keys (`labels`) can be read without loading the planner.
"""
