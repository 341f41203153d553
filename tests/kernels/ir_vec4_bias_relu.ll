; Explicit vector types: out = max(x * scale + bias, 0) four lanes at a time with
; <4 x float> loads/stores (align 4: buffers are only float-aligned), a splat of the
; scale argument, and the llvm.maxnum intrinsic. n is a multiple of 4.

declare <4 x float> @llvm.maxnum.v4f32(<4 x float>, <4 x float>)

define void @ir_vec4_bias_relu(ptr nocapture readonly %x, ptr nocapture readonly %bias, ptr nocapture %out, float %scale, i64 %n) {
entry:
  %s0 = insertelement <4 x float> poison, float %scale, i64 0
  %s = shufflevector <4 x float> %s0, <4 x float> poison, <4 x i32> zeroinitializer
  %empty = icmp sle i64 %n, 0
  br i1 %empty, label %exit, label %loop

loop:
  %i = phi i64 [ 0, %entry ], [ %i.next, %loop ]
  %px = getelementptr inbounds float, ptr %x, i64 %i
  %pb = getelementptr inbounds float, ptr %bias, i64 %i
  %po = getelementptr inbounds float, ptr %out, i64 %i
  %vx = load <4 x float>, ptr %px, align 4
  %vb = load <4 x float>, ptr %pb, align 4
  %m = fmul <4 x float> %vx, %s
  %a = fadd <4 x float> %m, %vb
  %r = call <4 x float> @llvm.maxnum.v4f32(<4 x float> %a, <4 x float> zeroinitializer)
  store <4 x float> %r, ptr %po, align 4
  %i.next = add nuw nsw i64 %i, 4
  %done = icmp sge i64 %i.next, %n
  br i1 %done, label %exit, label %loop

exit:
  ret void
}
