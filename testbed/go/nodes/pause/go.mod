module mmd-operator/testbed/go/nodes/pause

go 1.24.0
