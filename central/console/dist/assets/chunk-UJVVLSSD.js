var c=(b,a)=>()=>(a||b((a={exports:{}}).exports,a),a.exports);export{c as a};
