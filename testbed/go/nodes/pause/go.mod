module mmd-operator/tools/nodes/pause

go 1.24.0
