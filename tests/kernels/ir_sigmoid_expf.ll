; Sigmoid through an external libm call: out[i] = 1 / (1 + expf(-x[i])).
; @expf is undefined in the object and must be resolved by the loader.

declare float @expf(float)

define void @ir_sigmoid_expf(ptr nocapture readonly %x, ptr nocapture %out, i64 %n) {
entry:
  %empty = icmp sle i64 %n, 0
  br i1 %empty, label %exit, label %loop

loop:
  %i = phi i64 [ 0, %entry ], [ %i.next, %loop ]
  %px = getelementptr inbounds float, ptr %x, i64 %i
  %po = getelementptr inbounds float, ptr %out, i64 %i
  %v = load float, ptr %px, align 4
  %neg = fneg float %v
  %e = call float @expf(float %neg)
  %d = fadd float %e, 1.000000e+00
  %r = fdiv float 1.000000e+00, %d
  store float %r, ptr %po, align 4
  %i.next = add nuw nsw i64 %i, 1
  %done = icmp eq i64 %i.next, %n
  br i1 %done, label %exit, label %loop

exit:
  ret void
}
