import json
# A ResNet basic block pair, training step (forward + backward + SGD-free grads), batch 8.
N,C,H,W=8,64,56,56
T=[];O=[]
def t(name,shape,kind="activation"):
    n=1
    for s in shape:n*=s
    T.append({"name":name,"size":4*n,"shape":shape,"dtype":"f32","kind":kind});return name
def op(name,typ,ins,outs,flops=0,ws=0,inplace=None,attrs=None):
    d={"name":name,"type":typ,"inputs":ins,"outputs":outs,"flops":flops}
    if ws:d["workspace"]=ws
    if inplace:d["inplace"]=inplace
    if attrs:d["attrs"]=attrs
    O.append(d)
act=[N,C,H,W]; n=N*C*H*W
x=t("input",act,"input")
conv_attrs={"stride":[1,1],"padding":[1,1],"dilation":[1,1],"groups":1,"transposed":False}
im2col=4*C*9*N*H*W//4  # a quarter-size im2col tile
saved=[]
cur=x
for b in range(2):
    for j in range(2):
        w=t(f"param:layer{b}.conv{j}.weight",[C,C,3,3],"weight")
        g=t(f"param:layer{b}.bn{j}.weight",[C],"weight"); be=t(f"param:layer{b}.bn{j}.bias",[C],"weight")
        c=t(f"l{b}.conv{j}",act); op(f"l{b}.conv{j}","conv2d",[cur,w],[c],2*n*C*9,im2col,attrs=conv_attrs)
        bn=t(f"l{b}.bn{j}",act); mean=t(f"l{b}.bn{j}.mean",[C]); inv=t(f"l{b}.bn{j}.invstd",[C])
        op(f"l{b}.bn{j}","batch_norm",[c,g,be],[bn,mean,inv],8*n)
        if j==0:
            r=t(f"l{b}.relu{j}",act); op(f"l{b}.relu{j}","relu",[bn],[r],n,inplace=[[0,0]])
            saved.append((b,j,cur,c,bn,mean,inv,r)); cur=r
        else:
            a=t(f"l{b}.add",act); op(f"l{b}.add","add",[bn, saved[-1][2]],[a],n,inplace=[[0,0]])
            r=t(f"l{b}.relu{j}",act); op(f"l{b}.relu{j}","relu",[a],[r],n,inplace=[[0,0]])
            saved.append((b,j,cur,c,bn,mean,inv,r)); cur=r
# loss
loss=t("loss",[1],"output"); op("loss","mse_loss",[cur],[loss],n)
gcur=t("grad:out",act); op("loss_backward","mse_loss_backward",[loss,cur],[gcur],n)
for (b,j,inp,c,bn,mean,inv,r) in reversed(saved):
    gr=t(f"grad:l{b}.relu{j}",act); op(f"l{b}.relu{j}_backward","threshold_backward",[gcur,r],[gr],n,inplace=[[0,0]])
    gc=t(f"grad:l{b}.bn{j}",act); gg=t(f"grad:param:layer{b}.bn{j}.weight",[C],"output"); gb=t(f"grad:param:layer{b}.bn{j}.bias",[C],"output")
    op(f"l{b}.bn{j}_backward","batch_norm_backward",[gr,c,mean,inv,f"param:layer{b}.bn{j}.weight"],[gc,gg,gb],10*n)
    gi=t(f"grad:l{b}.conv{j}.input",act); gw=t(f"grad:param:layer{b}.conv{j}.weight",[C,C,3,3],"output")
    op(f"l{b}.conv{j}_backward","convolution_backward",[gc,inp,f"param:layer{b}.conv{j}.weight"],[gi,gw],4*n*C*9,im2col,attrs=conv_attrs)
    gcur=gi
T=[x for x in T]
# graph input grad is an output
for tt in T:
    if tt["name"]==gcur: tt["kind"]="output"
g={"format":"memplan-graph/1","name":"sample.resnet_block.8.train","alignment":256,
   "meta":{"model":"two ResNet basic blocks (64ch, 56x56)","mode":"train","batch":8,"generated":"by hand for the memplan sample"},
   "tensors":T,"ops":O}
json.dump(g,open("__import__("os").path.join(__import__("os").path.dirname(__file__), "resnet_block.train.json")","w"),indent=1)
print(len(T),len(O))
