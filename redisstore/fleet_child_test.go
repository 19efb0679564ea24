package redisstore_test

func isFleetChild() bool { return false }
func fleetChild() int     { return 0 }
