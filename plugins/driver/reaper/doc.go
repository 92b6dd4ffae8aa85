// Package reaper lets a plugin host adopt and reap the VM processes that a
// dead plugin leaves behind. VM processes run in sessions of their own so
// they outlive their plugin; when the plugin dies they are re-parented to the
// nearest "child subreaper", and without one to PID 1, which in containers
// often never reaps, leaving every finished VM as a zombie.
package reaper
