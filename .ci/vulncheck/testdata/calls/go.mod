module example.com/calls

go 1.26.0
