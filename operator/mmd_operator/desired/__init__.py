"""Pure builders of everything the operator creates, and the decision of what should exist.

`decision.desired_state` decides for one resource from the judgement of its world; the other modules build
one kind of child each. The words they share with the kube adapter (labels, names, digests) live in
`mmd_operator.vocabulary`.
"""
