package converter

// WithoutValueCopies makes e run every group, value-copying ones too
// (cgroup.copiesValue): the path valueCopy shortcuts, for comparing the
// two.
func WithoutValueCopies(e *Engine) { e.noValueCopies = true }
